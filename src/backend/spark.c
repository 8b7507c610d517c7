/* spark.c: the spark backend. The job starts in a Spark driver
 * (loom.spark.run in Python), which runs `loom run` for the coordinator
 * and one barrier stage of one Spark task per loom task; each Spark task
 * runs `loom agent` with attempt "any" and its task attempt id as its fence,
 * and again when its agent ends, until the coordinator is gone. So the
 * coordinator starts nothing itself: it takes each agent into the attempt
 * its task waits for (job retries and task restarts need no new Spark
 * stage), and refuses agents of an earlier stage attempt once a later one
 * registered (Spark relaunches a barrier stage whole when one of its tasks
 * is lost). The coordinator learns of an agent's end from its connection. */
#include "backend/backend.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* Set by loom.spark.run: what the driver found of its Spark application,
 * as JSON: {"app": id, "slots": task slots of the executors together,
 * "executors": n, "slots_per_executor": n, "dynamic_allocation": bool,
 * "how": where the slots come from, for people, "max_failures": the
 * application's spark.task.maxFailures, optional}. */
#define SPARK_ENV "LOOM_SPARK"

static int spark_check(const spec_job *s, char *err, size_t errlen) {
  const char *v = loom__tun_raw(LOOM_TUN_SPARK);
  if (!v || !*v) {
    snprintf(err, errlen,
             "a Spark job starts from its Spark driver, in Python: "
             "loom.spark.run(spark, spec) (see README, On Spark); `loom run` alone has no "
             "Spark application to run it in");
    return LOOM_ERESOURCE;
  }
  json_error_t je;
  json_t *j = json_loads(v, 0, &je);
  json_int_t slots = 0, per = 0, mf = 1;
  int dyn = 0;
  const char *app = NULL, *how = "";
  if (!j ||
      json_unpack_ex(j, &je, 0, "{s:s, s:I, s:I, s:b, s?s, s?I}", "app", &app, "slots", &slots,
                     "slots_per_executor", &per, "dynamic_allocation", &dyn, "how", &how,
                     "max_failures", &mf) < 0 ||
      mf < 1 || mf > 1001) {
    snprintf(err, errlen, "%s is not what loom.spark sets: %s", SPARK_ENV,
             j && mf < 1      ? "max_failures below 1"
             : j && mf > 1001 ? "max_failures above 1001 (loom's retries go up to 1000)"
                              : je.text);
    json_decref(j);
    return LOOM_EBACKEND;
  }
  int ntasks = 0;
  const spec_role *gpu_role = NULL;
  for (int i = 0; i < s->nroles; i++) {
    ntasks += s->roles[i].instances;
    if (s->roles[i].gpus > 0 && !gpu_role) gpu_role = &s->roles[i];
  }
  int rc = 0;
  if (dyn) {
    snprintf(err, errlen,
             "Spark application %s has dynamic allocation on "
             "(spark.dynamicAllocation.enabled=true): a barrier stage needs its executors to "
             "stay; start the SparkSession with spark.dynamicAllocation.enabled=false",
             app);
    rc = LOOM_ERESOURCE;
  } else if (slots < ntasks) {
    snprintf(err, errlen,
             "the job has %d tasks, all started together in one barrier stage, but Spark "
             "application %s has %lld task slots (%s): add executors or cores, or ask for fewer "
             "instances",
             ntasks, app, (long long)slots, how);
    rc = LOOM_ERESOURCE;
  } else if (gpu_role && per > 1) {
    snprintf(err, errlen,
             "role '%s' asks for %d GPUs per task, but Spark application %s runs %lld tasks per "
             "executor: tasks with GPUs need one task per executor (spark.task.cpus equal to "
             "spark.executor.cores)",
             gpu_role->name, gpu_role->gpus, app, (long long)per);
    rc = LOOM_ERESOURCE;
  }
  json_decref(j);
  return rc;
}

/* spark.task.maxFailures is how many times Spark lets one task fail before
 * it gives up on the job; a job that does not say otherwise gets the same
 * from loom: retries (restart: job) and max_restarts (restart: task) of
 * maxFailures - 1. Spark itself never retries a barrier task alone (it
 * relaunches the stage), so loom's own policy is what applies it. */
static int spark_defaults(spec_job *s, char *note, size_t notelen) {
  const char *v = loom__tun_raw(LOOM_TUN_SPARK);
  json_t *j = v ? json_loads(v, 0, NULL) : NULL;
  json_int_t mf = 0;
  if (!j || json_unpack(j, "{s:I}", "max_failures", &mf) < 0 || mf < 1 || mf > 1001 ||
      (s->retries_set && s->max_restarts_set)) {
    json_decref(j);
    return 0;
  }
  json_decref(j);
  int n = (int)(mf - 1);
  const char *what = !s->retries_set && !s->max_restarts_set ? "retries and max_restarts"
                     : !s->retries_set                       ? "retries"
                                                             : "max_restarts";
  if (!s->retries_set) s->retries = n;
  if (!s->max_restarts_set) s->max_restarts = n;
  bool both = !s->retries_set && !s->max_restarts_set;
  snprintf(note, notelen,
           "%s %d from spark.task.maxFailures=%lld (the spec sets %s): a task may fail %lld "
           "times, as Spark allows",
           what, n, (long long)mf,
           both             ? "neither"
           : s->retries_set ? "only retries"
                            : "only max_restarts",
           (long long)mf);
  return 1;
}

static int spark_probe(char *msg, size_t len) {
  snprintf(msg, len, "spark: jobs start from a Spark driver (loom.spark.run in Python)");
  return 0;
}

static int spark_create(backend *b, const spec_job *s, int ntasks) {
  b->priv = NULL;
  return 0;
}

/* Executors have their own CPUs; a task's GPUs are what Spark gave its
 * Spark task (CUDA_VISIBLE_DEVICES, set by loom.spark before the agent). */
static void spark_place(backend *b, int task_id, const spec_role *r, char *cpus, size_t cpuslen,
                        char *gpus, size_t gpuslen) {
  cpus[0] = 0;
  gpus[0] = 0;
}

static int spark_launch(backend *b, int task_id, char *const *argv, char *const *env, char *err,
                        size_t errlen) {
  return 0; /* the Spark task of task_id starts (or started) its agent */
}

static void spark_signal(backend *b, int task_id, int sig) {}
static const char *spark_host(backend *b, int task_id) { return NULL; }
static void spark_destroy(backend *b) { free(b); }

const backend_ops loom__backend_spark = {
    .name = "spark",
    .launcher = "the Spark task",
    .tracks_processes = false,
    .agents_any_attempt = true,
    .check = spark_check,
    .defaults = spark_defaults,
    .probe = spark_probe,
    .create = spark_create,
    .place = spark_place,
    .launch = spark_launch,
    .signal = spark_signal,
    .host = spark_host,
    .destroy = spark_destroy,
};
