/*
 * gcc-import: converts an ONNX model into a gcc-train model (.pb) and says
 * what it did (onnx/import.h).
 *
 *   gcc-import MODEL.onnx -o OUT.pb [--quiet] [--loss L --lr X ...]
 *   gcc-import MODEL -o OUT.pb | --export-onnx OUT.onnx   (either or both)
 *   gcc-import --list-ops
 *
 * Exit status: 0 success; 1 a file could not be read or written; 2 a bad
 * command line; 3 an invalid or unsupported model (the message names the
 * file and the node).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/flags.h"
#include "deploy/model_bundle.h"
#include "graph/loader.h"
#include "graph/outfile.h"
#include "graph/recipe.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "onnx/model_file.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: gcc-import MODEL.onnx -o OUT.pb [--quiet]\n"
          "       gcc-import MODEL [-o OUT.pb] --export-onnx OUT.onnx\n"
          "       gcc-import --list-ops\n"
          "\n"
          "Converts an ONNX model (opsets 1 to %d) into a gcc-train model and prints what it\n"
          "did: the opset, every ONNX op with its node count, how many were folded away and\n"
          "the IR ops the others became, the initializers, and the BatchNormalizations\n"
          "folded into convolutions (or kept, with a recipe). The file is recognised by its\n"
          "content.\n"
          "\n"
          "  -o, --output FILE   write the model there (atomically)\n"
          "  --export-onnx FILE  write the model's inference graph as ONNX (opset %d, as\n"
          "                      gcc-train --export-onnx: a trained .pb to ONNX Runtime\n"
          "                      without its data), atomically\n"
          "  --quiet             print nothing but errors\n"
          "  --list-ops          print the ONNX ops the importer maps, and exit\n"
          "\n"
          "With a recipe the .pb is trainable: its training spec is built from the flags\n"
          "as gcc-train builds it (see gcc-train --help), and a BatchNormalization stays one\n"
          "that trains as nn.BatchNorm2d (batch statistics, running mean and var saved as\n"
          "state) instead of being folded into the Conv before it:\n"
          "  --loss cross-entropy|mse  --optimizer sgd|adam|adamw  --lr X  --momentum X\n"
          "  --weight-decay X  --nesterov  --lr-schedule step:S[:G]|cosine[:T]|\n"
          "  warmup-cosine:W:M:MIN  --betas B1,B2  --weight-decay-on matrices|all\n"
          "  --clip-grad-norm M\n"
          "  --batch-size N  --epochs N  --dataset mnist|cifar10|npy  --mean M  --std S\n"
          "  --version, --help\n"
          "\n"
          "Exit status: 0 ok, 1 I/O failure, 2 bad command line, 3 invalid or unsupported "
          "model.\n",
          GCC_ONNX_MAX_OPSET, GCC_ONNX_EXPORT_OPSET);
}

int main(int argc, char **argv) {
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc-import: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  enum { OPT_QUIET = 256, OPT_LIST, OPT_VERSION, OPT_HELP, OPT_RECIPE, OPT_EXPORT_ONNX };
  static const struct option longopts[] = {
      {"output", required_argument, 0, 'o'},
      {"export-onnx", required_argument, 0, OPT_EXPORT_ONNX},
      {"quiet", no_argument, 0, OPT_QUIET},
      {"list-ops", no_argument, 0, OPT_LIST},
      {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},
      {"loss", required_argument, 0, OPT_RECIPE},
      {"optimizer", required_argument, 0, OPT_RECIPE},
      {"lr", required_argument, 0, OPT_RECIPE},
      {"momentum", required_argument, 0, OPT_RECIPE},
      {"weight-decay", required_argument, 0, OPT_RECIPE},
      {"weight-decay-on", required_argument, 0, OPT_RECIPE},
      {"betas", required_argument, 0, OPT_RECIPE},
      {"clip-grad-norm", required_argument, 0, OPT_RECIPE},
      {"nesterov", no_argument, 0, OPT_RECIPE},
      {"lr-schedule", required_argument, 0, OPT_RECIPE},
      {"batch-size", required_argument, 0, OPT_RECIPE},
      {"epochs", required_argument, 0, OPT_RECIPE},
      {"dataset", required_argument, 0, OPT_RECIPE},
      {"mean", required_argument, 0, OPT_RECIPE},
      {"std", required_argument, 0, OPT_RECIPE},
      {0, 0, 0, 0},
  };
  const char *output = NULL, *onnx_out = NULL;
  int quiet = 0, c, li = 0;
  gcc_recipe recipe;
  gcc_recipe_init(&recipe);
  char flag[64];
  gcc_diag rd = {0};
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":o:", longopts, &li)) != -1) {
    switch (c) {
    case OPT_RECIPE:
      snprintf(flag, sizeof flag, "--%s", longopts[li].name);
      if (gcc_recipe_set(&recipe, flag, optarg, &rd) != GCC_OK) {
        fprintf(stderr, "gcc-import: %s\n", rd.msg);
        return EXIT_USAGE;
      }
      break;
    case 'o': output = optarg; break;
    case OPT_EXPORT_ONNX: onnx_out = optarg; break;
    case OPT_QUIET: quiet = 1; break;
    case OPT_LIST: printf("%s\n", gcc_onnx_supported_ops()); return 0;
    case OPT_VERSION: printf("gcc-import (ONNX opsets 1 to %d)\n", GCC_ONNX_MAX_OPSET); return 0;
    case OPT_HELP: usage(stdout); return 0;
    case ':':
      fprintf(stderr, "gcc-import: %s needs a value\n", argv[optind - 1]);
      return EXIT_USAGE;
    default:
      fprintf(stderr, "gcc-import: unknown option '%s' (see --help)\n", argv[optind - 1]);
      return EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "gcc-import: no model given\n"
                                   : "gcc-import: exactly one model expected\n");
    usage(stderr);
    return EXIT_USAGE;
  }
  if (!output && !onnx_out) {
    fprintf(stderr, "gcc-import: -o OUT.pb (or --export-onnx OUT.onnx) is required\n");
    return EXIT_USAGE;
  }
  const char *path = argv[optind];
  gcc_diag d = {0};
  gcc_inputs_track(1); /* every file read is an input (graph/outfile.h) */
  /* the outputs, before the model is read: distinct, never the model */
  const gcc_named_path outs[] = {{"--output", output}, {"--export-onnx", onnx_out}};
  const gcc_named_path ins[] = {{"the model", path}};
  if (gcc_outfiles_check(outs, 2, ins, 1, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    return d.status == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_RUN;
  }
  if (gcc_recipe_check(&recipe, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    return EXIT_USAGE;
  }
  gcc_graph *g = NULL;
  gcc_model_info info;
  /* a trainable .pb keeps BatchNormalization (batch statistics, running
   * estimates as state); an inference one folds it into the Conv before it */
  gcc_onnx_options oo = {0};
  oo.train = gcc_recipe_given(&recipe);
  if (gcc_model_open_with(path, &oo, &g, &info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  /* the files the import read (external data) are inputs too */
  if (gcc_outfiles_check_inputs(outs, 2, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    gcc_graph_free(g);
    return EXIT_USAGE;
  }
  if (info.format != GCC_MODEL_FORMAT_ONNX && !quiet && output)
    fprintf(stderr, "gcc-import: %s is already a %s model; writing it again\n", path,
            gcc_model_format_name(info.format));
  if (gcc_recipe_given(&recipe)) { /* a trainable .pb */
    gcc_graph *t = NULL;
    if (gcc_recipe_apply(g, &recipe, &t, &d) != GCC_OK) {
      fprintf(stderr, "gcc-import: %s\n", d.msg);
      gcc_graph_free(g);
      return d.status == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_MODEL;
    }
    gcc_graph_free(g);
    g = t;
  }
  if (onnx_out) { /* the inference graph, as gcc-train --export-onnx writes it */
    gcc_graph *ig = NULL;
    gcc_onnx_export_options eo = {GCC_TRAIN_VERSION, NULL};
    gcc_status s = gcc_inference_graph(g, &ig, &d);
    if (s == GCC_OK)
      s = gcc_onnx_export_file(ig, &eo, onnx_out, "--export-onnx", &d);
    if (s == GCC_OK && !quiet)
      printf("wrote %s (ONNX opset %d: the inference graph, %d nodes)\n", onnx_out,
             GCC_ONNX_EXPORT_OPSET, ig->n_nodes);
    gcc_graph_free(ig);
    if (s != GCC_OK) {
      fprintf(stderr, "gcc-import: %s\n", d.msg); /* d names --export-onnx */
      gcc_graph_free(g);
      return s == GCC_ERR_IO || s == GCC_ERR_OUT_OF_MEMORY ? EXIT_RUN : EXIT_MODEL;
    }
    if (!output) {
      gcc_graph_free(g);
      return 0;
    }
  }
  if (gcc_model_save(g, output, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    gcc_graph_free(g);
    return EXIT_RUN;
  }
  if (!quiet) {
    if (info.format == GCC_MODEL_FORMAT_ONNX) {
      char buf[8192];
      printf("%s: %s", path, gcc_onnx_report_str(&info.onnx, buf, sizeof buf));
    }
    printf("inputs:");
    for (int i = 0; i < g->n_inputs; i++) {
      char sh[128];
      const gcc_value *v = &g->values[g->inputs[i]];
      printf(" %s %s %s", v->name, gcc_dtype_name(v->dtype),
             gcc_shape_str(&v->shape, sh, sizeof sh));
    }
    printf("\noutputs:");
    for (int i = 0; i < g->n_outputs; i++)
      printf(" %s", g->values[g->outputs[i]].name);
    printf("\nwrote %s (%d nodes%s)\n", output, g->n_nodes,
           g->training.present ? ", with a training spec" : "");
  }
  gcc_graph_free(g);
  return 0;
}
