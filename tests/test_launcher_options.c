/* Tests of launcher/options: the mapping from a configuration to the options of the env
 * factory, the actor, the evaluator, the learner and the parameter-server service. The
 * defaults of a config map to each module's own defaults (fl_*_opts_init; the learner's,
 * which has none, to what its tests take as a run's defaults, tests/learner_opts_util.h),
 * every key reaches its field, the config's enum strings become the modules' C enums, and
 * the optimizer is the learner's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "envs/registry.h"
#include "launcher/options.h"
#include "tests/learner_opts_util.h"

static void set(fl_config_t *c, const char *kv) {
    fl_err_t err;
    fl_err_init(&err);
    if (fl_config_set(c, kv, &err) != FL_OK) fail_msg("--set %s: %s", kv, err.msg);
}

static void assert_env_equal(const fl_env_factory_opts_t *a, const fl_env_factory_opts_t *b) {
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->plugin, b->plugin);
    assert_string_equal(a->wrappers, b->wrappers);
    assert_int_equal(a->max_episode_steps, b->max_episode_steps);
    assert_int_equal(a->num_envs, b->num_envs);
    assert_true(a->sticky_actions == b->sticky_actions);
    assert_int_equal(a->difficulty_ramping, b->difficulty_ramping);
    assert_int_equal(a->rng, b->rng);
    assert_string_equal(a->args, b->args);
}

static void assert_optim_equal(const fl_optim_config_t *a, const fl_optim_config_t *b) {
    assert_int_equal(a->kind, b->kind);
    assert_true(a->lr == b->lr);
    assert_true(a->beta1 == b->beta1);
    assert_true(a->beta2 == b->beta2);
    assert_true(a->eps == b->eps);
    assert_true(a->decay == b->decay);
    assert_true(a->momentum == b->momentum);
}

/* A config with no file and no --set gives each module its own defaults. */
static void test_defaults(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);

    fl_env_factory_opts_t e, e0;
    fl_options_env(&c, &e);
    fl_env_factory_opts_init(&e0);
    assert_env_equal(&e, &e0);

    fl_actor_opts_t a, a0;
    fl_options_actor(&c, &a);
    fl_actor_opts_init(&a0);
    assert_env_equal(&a.env, &a0.env);
    assert_int_equal(a.count, a0.count);
    assert_true(a.eps_base == a0.eps_base);
    assert_true(a.eps_alpha == a0.eps_alpha);
    assert_int_equal(a.local_buffer, a0.local_buffer);
    assert_int_equal(a.sync_every, a0.sync_every);
    assert_int_equal(a.fetch_bf16, a0.fetch_bf16);
    assert_int_equal(a.max_steps, a0.max_steps);
    assert_int_equal(a.n_step, a0.n_step);
    assert_true(a.gamma == a0.gamma);
    assert_string_equal(a.model_spec, a0.model_spec);
    assert_true(a.input_scale == a0.input_scale);
    assert_int_equal(a.backend, a0.backend);
    assert_int_equal(a.replay_shards, a0.replay_shards);
    assert_int_equal(a.seed, a0.seed);
    assert_true(a.progress_every == a0.progress_every);

    fl_evaluator_opts_t v, v0;
    fl_options_evaluator(&c, &v);
    fl_evaluator_opts_init(&v0);
    assert_env_equal(&v.env, &v0.env);
    assert_string_equal(v.model_spec, v0.model_spec);
    assert_true(v.input_scale == v0.input_scale);
    assert_int_equal(v.backend, v0.backend);
    assert_true(v.every == v0.every);
    assert_int_equal(v.every_learner_steps, v0.every_learner_steps);
    assert_int_equal(v.episodes, v0.episodes);
    assert_true(v.epsilon == v0.epsilon);
    assert_int_equal(v.max_episode_steps, v0.max_episode_steps);
    assert_int_equal(v.parallel, v0.parallel);
    assert_int_equal(v.count, v0.count);
    assert_int_equal(v.seed, v0.seed);
    assert_true(v.progress_every == v0.progress_every);

    fl_paramserver_service_opts_t p, p0;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_options_paramserver(&c, &p, &err), FL_OK);
    fl_paramserver_service_opts_init(&p0);
    assert_int_equal(p.mode, p0.mode);
    assert_int_equal(p.shards, p0.shards);
    assert_int_equal(p.learners, p0.learners);
    assert_int_equal(p.max_staleness, p0.max_staleness);
    assert_int_equal(p.stale_policy, p0.stale_policy);
    assert_int_equal(p.staleness_lr, p0.staleness_lr);
    assert_true(p.wait_timeout_s == p0.wait_timeout_s);
    assert_int_equal(p.threads, p0.threads);
    assert_optim_equal(&p.optim, &p0.optim);
    /* The default optimizer (rmsprop) mapped as a gorila shard would: the same. */
    fl_optim_config_t o;
    assert_int_equal(fl_options_optimizer(&c, &o, &err), FL_OK);
    assert_optim_equal(&o, &p0.optim);
}

static void test_env(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "env.name=minatar-breakout");
    set(&c, "env.plugin=libx.so");
    set(&c, "env.wrappers=framestack(2)");
    set(&c, "env.max_episode_steps=77");
    set(&c, "env.num_envs=5");
    set(&c, "env.sticky_actions=0.25");
    set(&c, "env.difficulty_ramping=false");
    set(&c, "env.rng=Reference");
    set(&c, "env.args=slip=0.5");
    fl_env_factory_opts_t e;
    fl_options_env(&c, &e);
    assert_string_equal(e.name, "minatar-breakout");
    assert_string_equal(e.plugin, "libx.so");
    assert_string_equal(e.wrappers, "framestack(2)");
    assert_int_equal(e.max_episode_steps, 77);
    assert_int_equal(e.num_envs, 5);
    assert_true(e.sticky_actions == 0.25);
    assert_int_equal(e.difficulty_ramping, 0);
    assert_int_equal(e.rng, FL_ENV_RNG_REFERENCE);
    assert_string_equal(e.args, "slip=0.5");
    fl_env_options_t io;
    fl_env_instance_options(&e, &io);
    assert_true(io.sticky_prob == 0.25f);
    assert_int_equal(io.difficulty_ramping, 0);
    assert_int_equal(io.reference_rng, 1);
    assert_string_equal(io.args, "slip=0.5");
    set(&c, "env.rng=fleet");
    fl_options_env(&c, &e);
    assert_int_equal(e.rng, FL_ENV_RNG_FLEET);
}

/* fl_options_open_env: the config's env, or an error naming the key. */
static void test_open_env(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "env.wrappers=framestack(3)");
    fl_wrapped_env_t *w = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_options_open_env(&c, &w, &err), FL_OK);
    assert_int_equal(fl_wrapped_env_info(w)->obs.shape[0], 12);
    fl_wrapped_env_destroy(w);
    set(&c, "env.name=no-such-env");
    assert_int_equal(fl_options_open_env(&c, &w, &err), FL_NOT_FOUND);
    assert_null(w);
    assert_true(strncmp(err.msg, "env.name: ", strlen("env.name: ")) == 0);
}

static void test_actor(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "env.num_envs=3");
    set(&c, "actor.count=9");
    set(&c, "actor.eps_base=0.5");
    set(&c, "actor.eps_alpha=3");
    set(&c, "actor.local_buffer=17");
    set(&c, "actor.sync_every=19");
    set(&c, "actor.fetch_bf16=true");
    set(&c, "actor.max_steps=1000000000000");
    set(&c, "learner.n_step=5");
    set(&c, "learner.gamma=0.5");
    set(&c, "model.spec=dense(4) relu");
    set(&c, "model.input_scale=255");
    set(&c, "replay.shards=4");
    set(&c, "run.seed=2147483647");
    set(&c, "run.progress_every=0.25");
    fl_actor_opts_t a;
    fl_options_actor(&c, &a);
    assert_int_equal(a.env.num_envs, 3);
    assert_string_equal(a.env.name, "cartpole");
    assert_int_equal(a.count, 9);
    assert_true(a.eps_base == 0.5);
    assert_true(a.eps_alpha == 3);
    assert_int_equal(a.local_buffer, 17);
    assert_int_equal(a.sync_every, 19);
    assert_int_equal(a.fetch_bf16, 1);
    assert_int_equal(a.max_steps, 1000000000000LL);
    assert_int_equal(a.n_step, 5);
    assert_true(a.gamma == 0.5);
    assert_string_equal(a.model_spec, "dense(4) relu");
    assert_true(a.input_scale == 255);
    assert_int_equal(a.replay_shards, 4);
    assert_int_equal(a.seed, 2147483647);
    assert_true(a.progress_every == 0.25);
}

static void test_paramserver(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "paramserver.shards=3");
    set(&c, "paramserver.max_staleness=4");
    set(&c, "paramserver.stale_policy=Wait");
    set(&c, "paramserver.staleness_lr=true");
    set(&c, "paramserver.wait_timeout_s=2.5");
    set(&c, "learner.count=6");
    set(&c, "learner.optimizer=adam");
    set(&c, "learner.lr=0.125");
    fl_paramserver_service_opts_t p, p0;
    fl_paramserver_service_opts_init(&p0);
    fl_err_t err;
    fl_err_init(&err);
    /* apex: the shards run no optimizer, it keeps the default */
    assert_int_equal(fl_options_paramserver(&c, &p, &err), FL_OK);
    assert_int_equal(p.mode, FL_PARAMSERVER_APEX);
    assert_int_equal(p.shards, 3);
    assert_optim_equal(&p.optim, &p0.optim);
    set(&c, "learner.mode=gorila");
    assert_int_equal(fl_options_paramserver(&c, &p, &err), FL_OK);
    assert_int_equal(p.mode, FL_PARAMSERVER_GORILA);
    assert_int_equal(p.shards, 3);
    assert_int_equal(p.learners, 6);
    assert_int_equal(p.max_staleness, 4);
    assert_int_equal(p.stale_policy, FL_PARAMSERVER_STALE_WAIT);
    assert_int_equal(p.staleness_lr, 1);
    assert_true(p.wait_timeout_s == 2.5);
    assert_int_equal(p.threads, 0);
    assert_int_equal(p.optim.kind, FL_OPTIM_ADAM);
    assert_true(p.optim.lr == 0.125f);
    set(&c, "paramserver.stale_policy=drop");
    assert_int_equal(fl_options_paramserver(&c, &p, &err), FL_OK);
    assert_int_equal(p.stale_policy, FL_PARAMSERVER_STALE_DROP);
    /* a name no config holds */
    c.learner_optimizer = (fl_cfg_learner_optimizer)7; /* no such optimizer */
    assert_int_equal(fl_options_paramserver(&c, &p, &err), FL_INVALID_ARGUMENT);
}

/* The learner.* optimizer keys: each optimizer takes its own. */
static void test_optimizer(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "learner.lr=0.5");
    set(&c, "learner.momentum=0.25");
    set(&c, "learner.adam_beta1=0.5");
    set(&c, "learner.adam_beta2=0.75");
    set(&c, "learner.adam_eps=0.125");
    set(&c, "learner.rmsprop_decay=0.625");
    set(&c, "learner.rmsprop_eps=0.0625");
    fl_optim_config_t o;
    fl_err_t err;
    fl_err_init(&err);
    set(&c, "learner.optimizer=sgd");
    assert_int_equal(fl_options_optimizer(&c, &o, &err), FL_OK);
    assert_int_equal(o.kind, FL_OPTIM_SGD);
    assert_true(o.lr == 0.5f && o.momentum == 0.25f);
    set(&c, "learner.optimizer=adam");
    assert_int_equal(fl_options_optimizer(&c, &o, &err), FL_OK);
    assert_int_equal(o.kind, FL_OPTIM_ADAM);
    assert_true(o.lr == 0.5f && o.beta1 == 0.5f && o.beta2 == 0.75f && o.eps == 0.125f);
    set(&c, "learner.optimizer=rmsprop");
    assert_int_equal(fl_options_optimizer(&c, &o, &err), FL_OK);
    assert_int_equal(o.kind, FL_OPTIM_RMSPROP);
    assert_true(o.lr == 0.5f && o.decay == 0.625f && o.eps == 0.0625f);
    assert_true(o.momentum == 0.0f); /* learner.momentum is SGD's */
}

/* env.preset: the protocols' wrappers and sticky actions, and what they refuse. */
static void test_presets(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    fl_err_t err;
    fl_err_init(&err);
    fl_env_factory_opts_t e;
    assert_int_equal(fl_config_set(&c, "env.preset=machado", &err), FL_OK);
    fl_options_env(&c, &e);
    assert_string_equal(e.wrappers, "frameskip(4) resize(84,84) clipreward maxsteps(27000) framestack(4)");
    assert_true(e.sticky_actions == 0.25);
    fl_wrapped_env_t *w = NULL;
    /* cartpole is no Atari game; an Atari game needs its -full variant; wrappers twice */
    assert_int_equal(fl_options_open_env(&c, &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not atari-*"));
    assert_int_equal(fl_config_set(&c, "env.name=atari-pong", &err), FL_OK);
    assert_int_equal(fl_options_open_env(&c, &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "atari-pong-full"));
    assert_int_equal(fl_config_set(&c, "env.preset=nature", &err), FL_OK);
    assert_int_equal(fl_config_set(&c, "env.wrappers=framestack(4)", &err), FL_OK);
    assert_int_equal(fl_options_open_env(&c, &w, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "give one of them"));
    assert_int_equal(fl_config_set(&c, "env.wrappers=", &err), FL_OK);
    fl_options_env(&c, &e);
    assert_true(e.sticky_actions == 0.0);
    assert_non_null(strstr(e.wrappers, "noop(30) frameskip(4) episodiclife"));
    if (fl_env_find("atari-pong")) { /* with ALE: Pong fires (action 1), and opens as 84x84x4 */
        assert_non_null(strstr(e.wrappers, "firereset"));
        assert_int_equal(fl_options_open_env(&c, &w, &err), FL_OK);
        const fl_env_def_t *d = fl_wrapped_env_info(w);
        assert_int_equal(d->obs.shape[0], 84);
        assert_int_equal(d->obs.shape[2], 4);
        assert_int_equal(d->max_episode_steps, 27000);
        fl_wrapped_env_destroy(w);
    }
}

/* model.cpu_kernels reaches the learner, the actors and the evaluators; auto is the
 * build's default backend; anything else is refused naming the choices. */
static void test_cpu_kernels(void **unused) {
    (void)unused;
    const char *sets[] = {NULL, "model.cpu_kernels=auto", "model.cpu_kernels=reference", "model.cpu_kernels=dnnl",
                          "model.cpu_kernels=onednn"};
    const fl_qnet_backend_kind want[] = {fl_qnet_default_backend(), fl_qnet_default_backend(), FL_QNET_BACKEND_REF,
                                         FL_QNET_BACKEND_DNNL, FL_QNET_BACKEND_ONEDNN};
    for (int i = 0; i < 5; i++) {
        fl_config_t c;
        fl_config_defaults(&c);
        if (sets[i]) set(&c, sets[i]);
        fl_err_t err;
        fl_err_init(&err);
        fl_actor_opts_t a;
        fl_evaluator_opts_t v;
        fl_learner_opts_t l;
        fl_options_actor(&c, &a);
        fl_options_evaluator(&c, &v);
        assert_int_equal(fl_options_learner(&c, &l, &err), FL_OK);
        assert_int_equal(a.backend, want[i]);
        assert_int_equal(v.backend, want[i]);
        assert_int_equal(l.backend, want[i]);
        assert_int_equal(fl_options_cpu_kernels(&c), want[i]);
    }
    fl_config_t c;
    fl_config_defaults(&c);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_not_equal(fl_config_set(&c, "model.cpu_kernels=mkl", &err), FL_OK);
    assert_non_null(strstr(err.msg, "auto|dnnl|reference|onednn"));
}

/* The learner's switches (learner.tf32, cuda_graphs, cudnn_benchmark of the GPU, and
 * flush_denormals of the CPU) reach its options: defaults on, on, off, on; each can be
 * turned the other way. */
static void test_learner_switches(void **unused) {
    (void)unused;
    for (int flip = 0; flip < 2; flip++) {
        fl_config_t c;
        fl_config_defaults(&c);
        if (flip) {
            set(&c, "learner.tf32=false");
            set(&c, "learner.cuda_graphs=off");
            set(&c, "learner.cudnn_benchmark=yes");
            set(&c, "learner.flush_denormals=0");
        }
        fl_err_t err;
        fl_err_init(&err);
        fl_learner_opts_t l;
        assert_int_equal(fl_options_learner(&c, &l, &err), FL_OK);
        assert_int_equal(l.tf32, !flip);
        assert_int_equal(l.cuda_graphs, !flip);
        assert_int_equal(l.cudnn_benchmark, flip);
        assert_int_equal(l.flush_denormals, !flip);
    }
}

/* A config of defaults maps, field by field, to the run's part of the learner options
 * the learner tests start from (tests/learner_opts_util.h), so that those tests keep
 * meaning what a default run does. */
static void test_learner_defaults(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    fl_learner_opts_t l, t;
    memset(&l, 0, sizeof l);
    memset(&t, 0, sizeof t);
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_options_learner(&c, &l, &err), FL_OK);
    learner_run_defaults(&t);
    assert_int_equal(l.count, t.count);
    assert_int_equal(l.mode, t.mode);
    assert_int_equal(l.device, t.device);
    assert_int_equal(l.threads, t.threads);
    assert_int_equal(l.flush_denormals, t.flush_denormals);
    assert_int_equal(l.tf32, t.tf32);
    assert_int_equal(l.cuda_graphs, t.cuda_graphs);
    assert_int_equal(l.cudnn_benchmark, t.cudnn_benchmark);
    assert_int_equal(l.batch_size, t.batch_size);
    assert_int_equal(l.optim.kind, t.optim.kind);
    assert_true(l.optim.lr == t.optim.lr && l.optim.momentum == t.optim.momentum);
    assert_true(l.optim.adam_beta1 == t.optim.adam_beta1 && l.optim.adam_beta2 == t.optim.adam_beta2 &&
                l.optim.adam_eps == t.optim.adam_eps);
    assert_true(l.optim.rmsprop_decay == t.optim.rmsprop_decay && l.optim.rmsprop_eps == t.optim.rmsprop_eps);
    assert_true(l.grad_clip == t.grad_clip);
    assert_true(l.huber_delta == t.huber_delta);
    assert_int_equal(l.target_update, t.target_update);
    assert_int_equal(l.publish_every, t.publish_every);
    assert_string_equal(l.checkpoint_dir, t.checkpoint_dir);
    assert_int_equal(l.checkpoint_every, t.checkpoint_every);
    assert_true(l.checkpoint_every_s == t.checkpoint_every_s);
    assert_int_equal(l.keep_checkpoints, t.keep_checkpoints);
    assert_int_equal(l.max_steps, t.max_steps);
    assert_int_equal(l.deterministic, t.deterministic);
    assert_int_equal(l.round_updates, t.round_updates);
    assert_int_equal(l.prefetch, t.prefetch);
    assert_int_equal(l.batches_per_call, t.batches_per_call);
    assert_int_equal(l.fetch_every, t.fetch_every);
    assert_int_equal(l.push_1bit, t.push_1bit);
    assert_int_equal(l.slow_push_ms, t.slow_push_ms);
    assert_string_equal(l.model_spec, t.model_spec);
    assert_true(l.input_scale == t.input_scale);
    assert_int_equal(l.backend, t.backend);
    assert_true(l.beta == t.beta);
    if (!(fabs(l.max_priority - t.max_priority) <= 1e-9 * t.max_priority))
        fail_msg("max_priority %.17g, the tests take %.17g", l.max_priority, t.max_priority);
    assert_int_equal(l.replay_shards, t.replay_shards);
    assert_true(l.paramserver_wait_timeout_s == t.paramserver_wait_timeout_s);
    assert_int_equal(l.seed, t.seed);
    assert_true(l.progress_every == t.progress_every);
}

/* The bounds the replay applies by default come from the env's reward bound: CartPole's
 * 1 a step makes the 3-step reward at most 2.9701 and a TD error at most 2.9701 + (1 +
 * 0.99^3) / 0.01; an Atari preset clips to 1 a step; an env without a bound (a plugin,
 * Atari's raw scores) keeps 1e6, as do keys set by hand. */
static void test_reward_bounds(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "learner.n_step=3");
    set(&c, "learner.gamma=0.99");
    assert_true(fl_options_step_reward_bound(&c, 0) == 1.0);
    assert_true(fabs(fl_options_max_abs_reward(&c) - 2.9701) < 1e-3);
    assert_true(fabs(fl_options_max_priority(&c) - (2.9701 + (1 + 0.970299) / 0.01)) < 1e-2);
    fl_actor_opts_t a;
    fl_options_actor(&c, &a);
    assert_true(a.max_abs_reward == fl_options_max_abs_reward(&c) && a.max_priority == fl_options_max_priority(&c));
    fl_replay_service_opts_t r;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_options_replay(&c, 0, &r, &err), FL_OK);
    assert_true(r.max_abs_reward == a.max_abs_reward && r.max_priority == a.max_priority);
    fl_learner_opts_t l;
    assert_int_equal(fl_options_learner(&c, &l, &err), FL_OK);
    assert_true(l.max_priority == a.max_priority);
    /* the keys by hand */
    set(&c, "replay.max_abs_reward=7");
    set(&c, "replay.max_priority=9");
    assert_true(fl_options_max_abs_reward(&c) == 7.0 && fl_options_max_priority(&c) == 9.0);
    /* MinAtar Seaquest: one step may give 110 */
    fl_config_defaults(&c);
    set(&c, "env.name=minatar-seaquest-v1");
    assert_true(fl_options_step_reward_bound(&c, 0) == 110.0);
    /* Atari: no bound of its own; clipped by the preset, not in evaluations */
    fl_config_defaults(&c);
    set(&c, "env.name=atari-pong");
    assert_true(fl_options_step_reward_bound(&c, 0) == 0.0);
    assert_true(fl_options_max_abs_reward(&c) == 1e6 && fl_options_max_priority(&c) == 1e6);
    set(&c, "env.preset=nature");
    set(&c, "learner.n_step=1");
    assert_true(fl_options_step_reward_bound(&c, 0) == 1.0);
    assert_true(fl_options_step_reward_bound(&c, 1) == 0.0);
    assert_true(fabs(fl_options_max_abs_reward(&c) - 1.0) < 1e-3);
    /* frame skipping sums: a declared bound of 2 a frame is 8 an agent step */
    set(&c, "env.preset=none");
    set(&c, "env.wrappers=frameskip(4) framestack(4)");
    set(&c, "env.reward_bound=2");
    assert_true(fl_options_step_reward_bound(&c, 0) == 8.0);
    assert_true(fl_options_step_reward_bound(&c, 1) == 8.0);
    /* a plugin declares nothing unless env.reward_bound says so */
    fl_config_defaults(&c);
    set(&c, "env.plugin=/nonexistent/libmyenv.so");
    assert_true(fl_options_step_reward_bound(&c, 0) == 0.0);
    set(&c, "env.reward_bound=5");
    assert_true(fl_options_step_reward_bound(&c, 0) == 5.0);
    assert_true(fl_env_reward_bound("minatar-breakout-v1") == 1.0 && fl_env_reward_bound("minatar-breakout-v2") == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learner_switches),
        cmocka_unit_test(test_learner_defaults),
        cmocka_unit_test(test_reward_bounds),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_open_env),
        cmocka_unit_test(test_actor),
        cmocka_unit_test(test_paramserver),
        cmocka_unit_test(test_optimizer),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_cpu_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
