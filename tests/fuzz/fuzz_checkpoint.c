/* libFuzzer harness: training checkpoints (gcc_checkpoint_parse and
 * gcc_checkpoint_check_position, runtime/checkpoint.h). The input's last 32
 * bytes are replaced by the SHA-256 of the rest before it is parsed, as a
 * crafted file would carry a valid checksum: the checks after it (the
 * header's sizes and position fields, the model) are what is fuzzed. A
 * parsed checkpoint's position is then checked against training sets of 1
 * to 5 batches per epoch and 3 epochs. Built and run by tools/fuzz.sh. */
#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 32)
    return 0;
  uint8_t *b = malloc(size);
  if (!b)
    return 0;
  memcpy(b, data, size);
  unsigned len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
           EVP_DigestUpdate(ctx, b, size - 32) == 1 &&
           EVP_DigestFinal_ex(ctx, b + size - 32, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  gcc_checkpoint c;
  gcc_diag d = {0};
  if (ok && gcc_checkpoint_parse(b, size, "fuzz.gcck", &c, &d) == GCC_OK) {
    for (int64_t nb = 1; nb <= 5; nb++)
      if (gcc_checkpoint_check_position(&c, nb, 3, &d) == GCC_OK &&
          (c.batch >= nb || c.epoch * nb + c.batch != c.step || c.epoch > 3))
        abort(); /* accepted a position that is not one of the run's */
    gcc_checkpoint_free(&c);
  }
  free(b);
  return 0;
}
