/* elasticprobe.c: a training-like loop under elastic membership. Every
 * step allreduces 1 from each rank (the sum must be the world size of the
 * current generation); after a membership change or a dead peer, it
 * re-forms and re-syncs the step from rank 0, as a real trainer would
 * re-sync its parameters. argv: STEPS [DIE_TASK DIE_STEP]: DIE_TASK
 * SIGKILLs itself at DIE_STEP on its first attempt. */
#include <loom.h>
#include <loom/comm.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int sync_step(loom_t *l, int64_t *step) { return loom_broadcast(l, step, sizeof *step, 0); }

int main(int argc, char **argv) {
  loom_t *l;
  if (loom_init(&l) != 0) return 2;
  int64_t steps = argc > 1 ? atoll(argv[1]) : 40, step = 0;
  const char *die = argc > 2 ? argv[2] : "", *me = getenv("LOOM_TASK");
  int64_t die_at = argc > 3 ? atoll(argv[3]) : -1;
  int first = atoi(getenv("LOOM_ATTEMPT") ? getenv("LOOM_ATTEMPT") : "0") == 0;
  int rc = sync_step(l, &step);
  loom_event(l, "training_again", NULL);
  printf("GEN %lld world=%d rank=%d step=%lld rc=%s\n", (long long)loom_generation(l),
         loom_world_size(l), loom_rank(l), (long long)step, loom_err_name(rc));
  fflush(stdout);
  while (step < steps) {
    if (first && !strcmp(me, die) && step == die_at) raise(SIGKILL);
    int64_t one = 1, sum = 0;
    if (rc == 0 && loom_membership_changed(l)) rc = LOOM_ECHANGED;
    if (rc == 0) rc = loom_allreduce(l, &one, &sum, 1, LOOM_I64, LOOM_SUM);
    if (rc == LOOM_ECHANGED || rc == LOOM_EPEER) {
      fprintf(stderr, "step %lld: %s: %s\n", (long long)step, loom_err_name(rc), loom_errmsg(l));
      rc = loom_comm_reform(l, 30000);
      if (rc == 0) rc = sync_step(l, &step);
      printf("GEN %lld world=%d rank=%d step=%lld rc=%s\n", (long long)loom_generation(l),
             loom_world_size(l), loom_rank(l), (long long)step, loom_err_name(rc));
      fflush(stdout);
      if (rc == LOOM_ECHANGED || rc == LOOM_EPEER) continue;
      if (rc != 0) break;
      loom_event(l, "training_again", NULL); /* for bench/recovery */
      continue;
    }
    if (rc != 0) break;
    if (sum != loom_world_size(l)) {
      fprintf(stderr, "step %lld: sum %lld != world %d\n", (long long)step, (long long)sum,
              loom_world_size(l));
      return 3;
    }
    step++;
    usleep(30000);
  }
  printf("ELASTICDONE task=%s rc=%s gen=%lld world=%d step=%lld\n", me, loom_err_name(rc),
         (long long)loom_generation(l), loom_world_size(l), (long long)step);
  loom_finish(l);
  return rc == 0 ? 0 : 1;
}
