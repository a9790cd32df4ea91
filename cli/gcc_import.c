/*
 * gcc-import: converts an ONNX model into a gcc-train model (.pb) and says
 * what it did (onnx/import.h).
 *
 *   gcc-import MODEL.onnx -o OUT.pb [--quiet]
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
#include "graph/loader.h"
#include "onnx/import.h"
#include "onnx/model_file.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: gcc-import MODEL.onnx -o OUT.pb [--quiet]\n"
          "       gcc-import --list-ops\n"
          "\n"
          "Converts an ONNX model (opsets 1 to %d) into a gcc-train model and prints what it\n"
          "did: the opset, every ONNX op with its node count, how many were folded away and\n"
          "the IR ops the others became, the initializers, and the BatchNormalizations\n"
          "folded into convolutions. The file is recognised by its content.\n"
          "\n"
          "  -o, --output FILE   write the model there (atomically)\n"
          "  --quiet             print nothing but errors\n"
          "  --list-ops          print the ONNX ops the importer maps, and exit\n"
          "  --version, --help\n"
          "\n"
          "Exit status: 0 ok, 1 I/O failure, 2 bad command line, 3 invalid or unsupported "
          "model.\n",
          GCC_ONNX_MAX_OPSET);
}

int main(int argc, char **argv) {
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc-import: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  enum { OPT_QUIET = 256, OPT_LIST, OPT_VERSION, OPT_HELP };
  static const struct option longopts[] = {
      {"output", required_argument, 0, 'o'},  {"quiet", no_argument, 0, OPT_QUIET},
      {"list-ops", no_argument, 0, OPT_LIST}, {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},     {0, 0, 0, 0},
  };
  const char *output = NULL;
  int quiet = 0, c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":o:", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': output = optarg; break;
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
  if (!output) {
    fprintf(stderr, "gcc-import: -o OUT.pb is required\n");
    return EXIT_USAGE;
  }
  const char *path = argv[optind];
  gcc_diag d = {0};
  gcc_graph *g = NULL;
  gcc_model_info info;
  if (gcc_model_open(path, &g, &info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-import: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  if (info.format != GCC_MODEL_FORMAT_ONNX && !quiet)
    fprintf(stderr, "gcc-import: %s is already a %s model; writing it again\n", path,
            gcc_model_format_name(info.format));
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
    printf("\nwrote %s (%d nodes)\n", output, g->n_nodes);
  }
  gcc_graph_free(g);
  return 0;
}
