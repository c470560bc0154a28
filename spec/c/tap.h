/* spec/c/tap.h: TAP output for the C hosts among the tests (one check per line, the plan last). */
#ifndef DLPACK_SPEC_TAP_H
#define DLPACK_SPEC_TAP_H

#include <stdio.h>

static int tests_run, tests_failed;

static void check(int ok, const char *what) {
  ++tests_run;
  if (!ok) ++tests_failed;
  printf("%sok %d - %s\n", ok ? "" : "not ", tests_run, what);
  fflush(stdout);
}

/* Prints the plan; the exit status: 0 when every check passed. */
static int done_testing(void) {
  printf("1..%d\n", tests_run);
  return tests_failed != 0;
}

#endif
