/*
 * memplan.c - per-device step-arena planning (memplan.h): lifetimes over
 * the schedule, views sharing their root's storage, node
 * workspaces, and their placement by a best-fit sweep (gcc_plan_intervals).
 */
#include "passes/memplan.h"

#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"

static size_t align_up(size_t x) {
  return (x + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
}

static int planned_kind(gcc_value_kind k) {
  return k == GCC_VALUE_ACTIVATION; /* inputs are bound to the loader's buffers */
}

static int dev_of(const gcc_graph *g, int v) {
  return g->values[v].device >= 0 ? g->values[v].device : GCC_DEV_CPU;
}

/* ---- the interval planner ----------------------------------------------
 *
 * Free gaps of the arena below `top` (everything from top up is free) are
 * kept in two treaps: by offset (to merge a freed block with its
 * neighbours) and by (size, offset) (best fit: the smallest gap that
 * holds a block, the lowest such). Expected O(log n) per operation. */

typedef struct treap {
  int64_t *k1, *k2; /* key: (k1, k2), lexicographic */
  int *l, *r;
  uint32_t *pri;
  int root;
} treap;

static uint32_t next_pri(uint64_t *s) {
  /* splitmix64: deterministic priorities, so plans are reproducible */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(z ^ (z >> 31));
}

static int key_less(const treap *t, int a, int64_t k1, int64_t k2) {
  return t->k1[a] < k1 || (t->k1[a] == k1 && t->k2[a] < k2);
}

/* Splits `n` into keys < (k1, k2) (*lo) and >= (*hi). */
static void tsplit(treap *t, int n, int64_t k1, int64_t k2, int *lo, int *hi) {
  if (n < 0) {
    *lo = *hi = -1;
    return;
  }
  if (key_less(t, n, k1, k2)) {
    tsplit(t, t->r[n], k1, k2, &t->r[n], hi);
    *lo = n;
  } else {
    tsplit(t, t->l[n], k1, k2, lo, &t->l[n]);
    *hi = n;
  }
}

static int tmerge(treap *t, int a, int b) {
  if (a < 0)
    return b;
  if (b < 0)
    return a;
  if (t->pri[a] > t->pri[b]) {
    t->r[a] = tmerge(t, t->r[a], b);
    return a;
  }
  t->l[b] = tmerge(t, a, t->l[b]);
  return b;
}

/* Inserts node n (its k1, k2 and pri set). */
static void tinsert(treap *t, int n) {
  int lo, hi;
  t->l[n] = t->r[n] = -1;
  tsplit(t, t->root, t->k1[n], t->k2[n], &lo, &hi);
  t->root = tmerge(t, tmerge(t, lo, n), hi);
}

/* Removes node n (keys are unique). */
static void terase(treap *t, int n) {
  int lo, mid, hi;
  tsplit(t, t->root, t->k1[n], t->k2[n], &lo, &hi);
  tsplit(t, hi, t->k1[n], t->k2[n] + 1, &mid, &hi);
  t->root = tmerge(t, lo, hi);
}

/* The node of the smallest key >= (k1, k2), or -1. */
static int tlower_bound(const treap *t, int64_t k1, int64_t k2) {
  int n = t->root, best = -1;
  while (n >= 0) {
    if (key_less(t, n, k1, k2)) {
      n = t->r[n];
    } else {
      best = n;
      n = t->l[n];
    }
  }
  return best;
}

/* The node of the largest key < (k1, k2), or -1. */
static int tbefore(const treap *t, int64_t k1, int64_t k2) {
  int n = t->root, best = -1;
  while (n >= 0) {
    if (key_less(t, n, k1, k2)) {
      best = n;
      n = t->r[n];
    } else {
      n = t->l[n];
    }
  }
  return best;
}

typedef struct gaps {
  treap by_off, by_size; /* node g is gap g in both */
  int64_t *off, *size;
  int *free_ids, n_free;
  int64_t top;
  uint64_t seed;
} gaps;

static void gap_add(gaps *s, int64_t off, int64_t size) {
  int g = s->free_ids[--s->n_free];
  s->off[g] = off;
  s->size[g] = size;
  s->by_off.k1[g] = off;
  s->by_off.k2[g] = 0;
  s->by_size.k1[g] = size;
  s->by_size.k2[g] = off;
  s->by_off.pri[g] = next_pri(&s->seed);
  s->by_size.pri[g] = next_pri(&s->seed);
  tinsert(&s->by_off, g);
  tinsert(&s->by_size, g);
}

static void gap_remove(gaps *s, int g) {
  terase(&s->by_off, g);
  terase(&s->by_size, g);
  s->free_ids[s->n_free++] = g;
}

/* Best fit: the smallest free gap that holds `bytes` (the lowest of those),
 * else the top of the arena (taking in a free gap that ends there). */
static int64_t gaps_alloc(gaps *s, int64_t bytes) {
  int g = tlower_bound(&s->by_size, bytes, INT64_MIN);
  if (g >= 0) {
    int64_t off = s->off[g], size = s->size[g];
    gap_remove(s, g);
    if (size > bytes)
      gap_add(s, off + bytes, size - bytes);
    return off;
  }
  int64_t off = s->top;
  g = tbefore(&s->by_off, s->top, 0);
  if (g >= 0 && s->off[g] + s->size[g] == s->top) {
    off = s->off[g];
    gap_remove(s, g);
  }
  s->top = off + bytes;
  return off;
}

static void gaps_free(gaps *s, int64_t off, int64_t bytes) {
  int64_t end = off + bytes;
  int g = tbefore(&s->by_off, off, 0);
  if (g >= 0 && s->off[g] + s->size[g] == off) {
    off = s->off[g];
    gap_remove(s, g);
  }
  g = tlower_bound(&s->by_off, end, 0);
  if (g >= 0 && s->off[g] == end) {
    end += s->size[g];
    gap_remove(s, g);
  }
  if (end == s->top)
    s->top = off; /* back to the free space above everything */
  else
    gap_add(s, off, end - off);
}

/* sweep order: by start, the larger block first, then by index; and by end */
typedef struct ev {
  int64_t key;
  size_t bytes;
  int id;
} ev;

static int cmp_ev(const void *pa, const void *pb) {
  const ev *a = pa, *b = pb;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* ---- greedy by size -------------------------------------------------------
 *
 * The blocks in order of decreasing size (then index), each at the
 * lowest-offset smallest gap among the already placed blocks whose
 * intervals overlap its own, else above them all (TensorFlow Lite's
 * "greedy by size" arena planner; the planner's former algorithm, with the
 * same results). The overlapping placed blocks are found through two
 * indexes instead of a scan of all: a segment tree over the schedule whose
 * nodes list the placed blocks covering them (those that contain the
 * query's first point) and, per start point, the placed blocks starting
 * there with a Fenwick tree of their counts (those that start inside the
 * query). Its cost is the number of overlapping pairs, quadratic when many
 * blocks live together (the saved activations of a deep network's
 * training), so it stops after `budget` of them (returns 0). Returns 1 when
 * done, -1 when out of memory. */

/* overlapping pairs greedy by size may visit: linear in the blocks */
#define GREEDY_BUDGET(n) (32 * (int64_t)(n) + ((int64_t)1 << 20))

typedef struct busy_block {
  int64_t off, end;
} busy_block;

static int by_offset(const void *a, const void *b) {
  const busy_block *x = a, *y = b;
  return (x->off > y->off) - (x->off < y->off);
}

static int by_size_desc(const void *a, const void *b) {
  const ev *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes < y->bytes ? 1 : -1;
  return (x->id > y->id) - (x->id < y->id);
}

static int greedy_by_size(const gcc_mem_interval *iv, int n, int64_t *offset, size_t *peak,
                          int64_t budget) {
  int lo = INT32_MAX, hi = INT32_MIN;
  for (int i = 0; i < n; i++) {
    int f = iv[i].first < iv[i].last ? iv[i].first : iv[i].last;
    lo = f < lo ? f : lo;
    hi = iv[i].last > hi ? iv[i].last : hi;
  }
  int64_t t_count = (int64_t)hi - lo + 1;
  int64_t p = 1;
  while (p < t_count)
    p *= 2;
  size_t cnt = (size_t)n, pc = (size_t)p;
  ev *order = malloc(cnt * sizeof *order);
  int *seg_start = calloc(2 * pc + 1, sizeof *seg_start); /* CSR of the tree nodes' lists */
  int *seg_len = calloc(2 * pc, sizeof *seg_len);
  int *bk_start = calloc(pc + 1, sizeof *bk_start); /* CSR of the start buckets */
  int *bk_len = calloc(pc, sizeof *bk_len);
  int *fen = calloc(pc + 1, sizeof *fen);
  busy_block *busy = malloc(cnt * sizeof *busy);
  int *seg_items = NULL, *bk_items = malloc(cnt * sizeof *bk_items);
  int ok = -1;
  if (!order || !seg_start || !seg_len || !bk_start || !bk_len || !fen || !busy || !bk_items)
    goto done;
  /* sizes of the lists: each block in its O(log T) canonical nodes */
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    int64_t f = (iv[i].first < iv[i].last ? iv[i].first : iv[i].last) - lo;
    for (int64_t l = f + p, r = iv[i].last - lo + p + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1)
        seg_start[1 + l++]++, total++;
      if (r & 1)
        seg_start[1 + --r]++, total++;
    }
    bk_start[f + 1]++;
  }
  for (int64_t k = 0; k < 2 * p; k++)
    seg_start[k + 1] += seg_start[k];
  for (int64_t k = 0; k < p; k++)
    bk_start[k + 1] += bk_start[k];
  seg_items = malloc((total ? total : 1) * sizeof *seg_items);
  if (!seg_items)
    goto done;
  for (int i = 0; i < n; i++)
    order[i] = (ev){0, iv[i].bytes, i};
  qsort(order, cnt, sizeof *order, by_size_desc);
  *peak = 0;
  int64_t work = 0;
  for (int it = 0; it < n; it++) {
    int id = order[it].id;
    int64_t a = (iv[id].first < iv[id].last ? iv[id].first : iv[id].last) - lo;
    int64_t b = iv[id].last - lo;
    int nb = 0;
    /* placed blocks that contain a */
    for (int64_t node = a + p; node >= 1; node >>= 1)
      for (int k = 0; k < seg_len[node]; k++) {
        int o = seg_items[seg_start[node] + k];
        busy[nb++] = (busy_block){offset[o], offset[o] + (int64_t)iv[o].bytes};
      }
    /* placed blocks that start in (a, b]: walk the occupied start points */
    int64_t below = 0; /* placed blocks starting at or before a */
    for (int64_t k = a + 1; k > 0; k -= k & -k)
      below += fen[k];
    for (;;) {
      /* the first start point whose prefix count exceeds `below` */
      int64_t pos = 0, rem = below + 1;
      for (int64_t step = p; step > 0; step >>= 1)
        if (pos + step <= p && fen[pos + step] < rem) {
          pos += step;
          rem -= fen[pos];
        }
      if (pos >= p || pos > b) /* start point `pos` (0-based) */
        break;
      for (int k = 0; k < bk_len[pos]; k++) {
        int o = bk_items[bk_start[pos] + k];
        busy[nb++] = (busy_block){offset[o], offset[o] + (int64_t)iv[o].bytes};
      }
      below += bk_len[pos];
    }
    work += nb + 1;
    if (work > budget) {
      ok = 0;
      goto done;
    }
    qsort(busy, (size_t)nb, sizeof *busy, by_offset);
    int64_t best = -1, cursor = 0;
    uint64_t best_gap = UINT64_MAX;
    for (int j = 0; j < nb; j++) {
      if (busy[j].off > cursor) {
        uint64_t gap = (uint64_t)(busy[j].off - cursor);
        if (gap >= iv[id].bytes && gap < best_gap) {
          best = cursor;
          best_gap = gap;
        }
      }
      if (busy[j].end > cursor)
        cursor = busy[j].end;
    }
    if (best < 0)
      best = cursor;
    offset[id] = best;
    if ((size_t)best + iv[id].bytes > *peak)
      *peak = (size_t)best + iv[id].bytes;
    /* index it */
    for (int64_t l = a + p, r = b + p + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1) {
        seg_items[seg_start[l] + seg_len[l]++] = id;
        l++;
      }
      if (r & 1) {
        --r;
        seg_items[seg_start[r] + seg_len[r]++] = id;
      }
    }
    bk_items[bk_start[a] + bk_len[a]++] = id;
    for (int64_t k = a + 1; k <= p; k += k & -k)
      fen[k]++;
  }
  ok = 1;
done:
  free(order);
  free(seg_start);
  free(seg_len);
  free(bk_start);
  free(bk_len);
  free(fen);
  free(busy);
  free(seg_items);
  free(bk_items);
  return ok;
}

gcc_status gcc_plan_intervals(const gcc_mem_interval *iv, int n, int64_t *offset, size_t *peak,
                              gcc_diag *d) {
  *peak = 0;
  if (n <= 0)
    return GCC_OK;
  size_t cnt = (size_t)n, gcnt = cnt + 2; /* gaps: at most one more than the live blocks */
  ev *by_start = malloc(cnt * sizeof *by_start), *by_end = malloc(cnt * sizeof *by_end);
  gaps s = {0};
  int64_t *k = malloc(6 * gcnt * sizeof *k);
  int *links = malloc(5 * gcnt * sizeof *links);
  uint32_t *pri = malloc(2 * gcnt * sizeof *pri);
  if (!by_start || !by_end || !k || !links || !pri) {
    free(by_start);
    free(by_end);
    free(k);
    free(links);
    free(pri);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (memory planning)");
  }
  s.by_off = (treap){k, k + gcnt, links, links + gcnt, pri, -1};
  s.by_size =
      (treap){k + 2 * gcnt, k + 3 * gcnt, links + 2 * gcnt, links + 3 * gcnt, pri + gcnt, -1};
  s.off = k + 4 * gcnt;
  s.size = k + 5 * gcnt;
  s.free_ids = links + 4 * gcnt;
  for (size_t i = 0; i < gcnt; i++)
    s.free_ids[i] = (int)(gcnt - 1 - i);
  s.n_free = (int)gcnt;
  s.seed = 0x6763632d6d656d70ull;
  for (int i = 0; i < n; i++) {
    int first = iv[i].first < iv[i].last ? iv[i].first : iv[i].last;
    by_start[i] = (ev){first, iv[i].bytes, i};
    by_end[i] = (ev){iv[i].last, 0, i}; /* by end, then index */
  }
  qsort(by_start, cnt, sizeof *by_start, cmp_ev);
  qsort(by_end, cnt, sizeof *by_end, cmp_ev);
  /* sweep the schedule: before the blocks that start at t are placed, those
   * that ended before t give their bytes back */
  int e = 0;
  for (int i = 0; i < n; i++) {
    while (e < n && by_end[e].key < by_start[i].key) {
      if (iv[by_end[e].id].bytes) /* an empty block takes nothing and gives nothing back */
        gaps_free(&s, offset[by_end[e].id], (int64_t)iv[by_end[e].id].bytes);
      e++;
    }
    offset[by_start[i].id] = by_start[i].bytes ? gaps_alloc(&s, (int64_t)by_start[i].bytes) : 0;
    if ((size_t)s.top > *peak)
      *peak = (size_t)s.top;
  }
  free(by_start);
  free(by_end);
  free(k);
  free(links);
  free(pri);
  /* greedy by size, within its budget of overlapping pairs: the smaller
   * plan wins (greedy by size on a tie) */
  int64_t *alt = malloc(cnt * sizeof *alt);
  size_t alt_peak = 0;
  int r = alt ? greedy_by_size(iv, n, alt, &alt_peak, GREEDY_BUDGET(n)) : -1;
  if (r > 0 && alt_peak <= *peak) {
    memcpy(offset, alt, cnt * sizeof *alt);
    *peak = alt_peak;
  }
  free(alt);
  if (r < 0)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (memory planning)");
  return GCC_OK;
}

/* A block to place: value v (v < n_values) or the workspace of node
 * v - n_values, on device dev. */
typedef struct item {
  int v, dev;
  gcc_mem_interval iv;
} item;

static int by_device(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->dev != y->dev)
    return x->dev - y->dev;
  return x->v - y->v;
}

void gcc_mem_plan_free(gcc_mem_plan *p) {
  free(p->offset);
  free(p->root);
  free(p->first);
  free(p->last);
  free(p->device_bytes);
  free(p->ws_offset);
  free(p->ws_bytes);
  memset(p, 0, sizeof *p);
}

gcc_status gcc_plan_memory(const gcc_graph *g, const int *keep_live, int n_keep,
                           gcc_node_workspace_fn workspace, gcc_mem_plan *out, gcc_diag *d) {
  int nv = g->n_values, nn = g->n_nodes;
  memset(out, 0, sizeof *out);
  out->n_values = nv;
  size_t cnt = (size_t)(nv ? nv : 1);
  out->offset = malloc(cnt * sizeof *out->offset);
  out->root = malloc(cnt * sizeof *out->root);
  out->first = malloc(cnt * sizeof *out->first);
  out->last = malloc(cnt * sizeof *out->last);
  char *used = calloc(cnt, 1);
  size_t icnt = cnt + (size_t)nn;
  item *items = malloc(icnt * sizeof *items);
  gcc_mem_interval *ivs = malloc(icnt * sizeof *ivs);
  int64_t *offs = malloc(icnt * sizeof *offs);
  out->n_nodes = nn;
  out->ws_offset = malloc((size_t)(nn ? nn : 1) * sizeof *out->ws_offset);
  out->ws_bytes = calloc((size_t)(nn ? nn : 1), sizeof *out->ws_bytes);
  out->n_devices = 1;
  for (int v = 0; v < nv; v++)
    if (dev_of(g, v) + 1 > out->n_devices)
      out->n_devices = dev_of(g, v) + 1;
  out->device_bytes = calloc((size_t)out->n_devices, sizeof *out->device_bytes);
  if (!out->device_bytes || !out->offset || !out->root || !out->first || !out->last || !used ||
      !items || !ivs || !offs || !out->ws_offset || !out->ws_bytes) {
    free(used);
    free(items);
    free(ivs);
    free(offs);
    gcc_mem_plan_free(out);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (memory planning)");
  }
  for (int v = 0; v < nv; v++) {
    out->offset[v] = -1;
    out->root[v] = v;
    out->first[v] = INT32_MAX;
    out->last[v] = -1;
  }
  /* roots of views, and lifetimes (schedule indices; inputs start at -1).
   * A node of a fused group runs when its group runs (codegen/fusion.c): a
   * GEMM group at its first node, any other group at its last, so every
   * input and output of the group lives at that point. */
  for (int j = 0; j < nn; j++) {
    const gcc_node *n = &g->nodes[j];
    int i = j;
    if (n->group >= 0 && n->group < g->n_groups)
      i = gcc_group_point(&g->groups[n->group]);
    if ((gcc_op(n->op)->flags & GCC_OPF_ALIAS) && n->inputs[0] >= 0)
      out->root[n->outputs[0]] = out->root[n->inputs[0]];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      int r = out->root[v];
      used[r] = 1;
      if (g->values[r].kind == GCC_VALUE_INPUT && out->first[r] > -1)
        out->first[r] = -1;
      if (out->last[r] < i)
        out->last[r] = i;
    }
    for (int k = 0; k < n->n_outputs; k++) {
      int r = out->root[n->outputs[k]];
      used[r] = 1;
      if (out->first[r] > i)
        out->first[r] = i;
      if (out->last[r] < i)
        out->last[r] = i;
    }
  }
  for (int k = 0; k < n_keep; k++)
    if (keep_live[k] >= 0) {
      int r = out->root[keep_live[k]];
      used[r] = 1;
      if (out->first[r] == INT32_MAX)
        out->first[r] = -1;
      out->last[r] = nn;
    }
  for (int i = 0; i < g->n_inputs; i++) {
    int r = g->inputs[i];
    if (used[r] && out->first[r] > -1)
      out->first[r] = -1;
  }

  /* the blocks to place: planned roots, then node workspaces */
  int n_items = 0;
  for (int v = 0; v < nv; v++) {
    if (out->root[v] != v || !used[v] || !planned_kind(g->values[v].kind))
      continue;
    int64_t numel = gcc_shape_numel(&g->values[v].shape, NULL);
    size_t bytes = align_up((size_t)(numel > 0 ? numel : 1) * gcc_dtype_size(g->values[v].dtype));
    items[n_items] = (item){v, dev_of(g, v), {bytes, out->first[v], out->last[v]}};
    n_items++;
    out->total_bytes += bytes;
  }
  for (int i = 0; i < nn; i++) {
    const gcc_node *n = &g->nodes[i];
    int dev = n->device >= 0 ? n->device : GCC_DEV_CPU;
    out->ws_offset[i] = -1;
    if (!workspace || dev != GCC_DEV_CPU)
      continue;
    size_t bytes = workspace(g, i);
    if (!bytes)
      continue;
    bytes = align_up(bytes);
    out->ws_bytes[i] = bytes;
    items[n_items] = (item){nv + i, dev, {bytes, i, i}};
    n_items++;
    out->total_bytes += bytes;
  }
  /* one sweep per device: only blocks of one device share bytes */
  qsort(items, (size_t)n_items, sizeof *items, by_device);
  gcc_status st = GCC_OK;
  for (int lo = 0; lo < n_items && st == GCC_OK;) {
    int hi = lo;
    while (hi < n_items && items[hi].dev == items[lo].dev)
      hi++;
    for (int k = lo; k < hi; k++)
      ivs[k - lo] = items[k].iv;
    st = gcc_plan_intervals(ivs, hi - lo, offs, &out->device_bytes[items[lo].dev], d);
    for (int k = lo; st == GCC_OK && k < hi; k++) {
      if (items[k].v < nv)
        out->offset[items[k].v] = offs[k - lo];
      else
        out->ws_offset[items[k].v - nv] = offs[k - lo];
    }
    lo = hi;
  }
  free(items);
  free(ivs);
  free(offs);
  if (st != GCC_OK) {
    free(used);
    gcc_mem_plan_free(out);
    return st;
  }
  out->arena_bytes = out->device_bytes[GCC_DEV_CPU];
  /* views get their root's offset */
  for (int v = 0; v < nv; v++)
    if (out->root[v] != v)
      out->offset[v] = out->offset[out->root[v]];
  free(used);
  return GCC_OK;
}
