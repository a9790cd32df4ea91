/*
 * compare_params - compares the parameters of two trained models (.pb), for
 * the data-parallel tests (tests/mpi_data_parallel_test.sh):
 *
 *   compare_params A.pb B.pb RTOL
 *
 * Every parameter of B must exist in A with the same shape, and for each
 * parameter tensor max|a - b| <= RTOL * max|b| (relative to the tensor's
 * largest magnitude: elementwise relative error is meaningless for
 * elements near 0). Prints one line per parameter (max abs difference,
 * relative to max|b|, and the largest elementwise relative difference among
 * elements with |b| >= 1e-3 * max|b|); exit 0 when all pass, 1 when one
 * fails, 2 on bad arguments or unreadable models.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/loader.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: compare_params A.pb B.pb RTOL\n");
    return 2;
  }
  double rtol = atof(argv[3]);
  gcc_diag d = {0};
  gcc_graph *a = NULL, *b = NULL;
  if (gcc_model_load(argv[1], &a, &d) != GCC_OK || gcc_model_load(argv[2], &b, &d) != GCC_OK) {
    fprintf(stderr, "compare_params: %s\n", d.msg);
    gcc_graph_free(a);
    return 2;
  }
  int bad = 0, n = 0;
  double worst = 0;
  for (int v = 0; v < b->n_values; v++) {
    const gcc_value *vb = &b->values[v];
    if (vb->kind != GCC_VALUE_PARAM || vb->dtype != GCC_DT_FLOAT32)
      continue;
    int va_i = gcc_graph_find(a, vb->name);
    if (va_i < 0 || !gcc_shape_equal(&a->values[va_i].shape, &vb->shape)) {
      printf("%s: missing or of another shape in %s\n", vb->name, argv[1]);
      bad = 1;
      continue;
    }
    const float *x = a->values[va_i].data, *y = vb->data;
    int64_t numel = gcc_shape_numel(&vb->shape, NULL);
    double scale = 0, maxabs = 0, maxrel = 0;
    for (int64_t i = 0; i < numel; i++)
      scale = fmax(scale, fabs((double)y[i]));
    for (int64_t i = 0; i < numel; i++) {
      double e = fabs((double)x[i] - (double)y[i]);
      maxabs = fmax(maxabs, e);
      if (fabs((double)y[i]) >= 1e-3 * scale && y[i] != 0)
        maxrel = fmax(maxrel, e / fabs((double)y[i]));
    }
    double rel = scale > 0 ? maxabs / scale : maxabs;
    int ok = rel <= rtol;
    printf("%-24s %8lld values: max |a-b| %.3g, / max|b| %.3g, max elementwise rel %.3g  %s\n",
           vb->name, (long long)numel, maxabs, rel, maxrel, ok ? "ok" : "FAIL");
    worst = fmax(worst, rel);
    bad |= !ok;
    n++;
  }
  printf("%d parameters compared, worst relative difference %.3g (tolerance %g): %s\n", n, worst,
         rtol, bad || n == 0 ? "FAIL" : "ok");
  gcc_graph_free(a);
  gcc_graph_free(b);
  return bad || n == 0 ? 1 : 0;
}
