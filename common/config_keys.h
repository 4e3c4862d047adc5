/* config_keys: every configuration key of fleet, its type, default, accepted range and
 * meaning. One line per key; the config module turns this table into the typed struct
 * fl_config_t (field `section_key`), the parser, the validator, the dump and the help.
 *
 * X(section, key, TYPE, default, min, max, choices, help)
 *   TYPE    INT (int64_t), FLOAT (double), BOOL (int 0/1), STRING (char[256]),
 *           ENUM (fl_cfg_<section>_<key>, one of `choices`, '|'-separated; the enum is
 *           declared below, its enumerators in the order of the choices)
 *   min/max inclusive bounds for INT and FLOAT (ignored otherwise)
 * Defaults are the default experiment's: Ape-X DQN on CartPole on one machine, which solves it
 * (docs/design.md, "Algorithm defaults"); the files in configs/ override them per experiment,
 * configs/atari-*.ini with the Ape-X paper's Atari settings. */
#ifndef FL_COMMON_CONFIG_KEYS_H
#define FL_COMMON_CONFIG_KEYS_H

/* The values of the ENUM keys: one enum per ENUM row below, named fl_cfg_<section>_<key>,
 * its enumerators in the order of the row's choices (tests/test_config.c checks every one
 * against the table). An ENUM row without its enum here does not compile; a new choice
 * is one more enumerator here and one more word in the row. */
/* One enum a line, one key a row: */
/* clang-format off */
typedef enum { FL_CFG_LOG_DEBUG, FL_CFG_LOG_INFO, FL_CFG_LOG_WARN, FL_CFG_LOG_ERROR } fl_cfg_run_log_level;
typedef enum { FL_CFG_RNG_FLEET, FL_CFG_RNG_REFERENCE } fl_cfg_env_rng;
typedef enum { FL_CFG_SELECTOR_PRIORITIZED, FL_CFG_SELECTOR_UNIFORM, FL_CFG_SELECTOR_FIFO } fl_cfg_replay_selector;
typedef enum { FL_CFG_STALE_DROP, FL_CFG_STALE_WAIT } fl_cfg_paramserver_stale_policy;
typedef enum { FL_CFG_MODE_APEX, FL_CFG_MODE_GORILA } fl_cfg_learner_mode;
typedef enum { FL_CFG_DEVICE_CPU, FL_CFG_DEVICE_CUDA, FL_CFG_DEVICE_AUTO } fl_cfg_learner_device;
typedef enum { FL_CFG_OPTIM_RMSPROP, FL_CFG_OPTIM_ADAM, FL_CFG_OPTIM_SGD } fl_cfg_learner_optimizer;
typedef enum { FL_CFG_TARGET_EVAL, FL_CFG_TARGET_TRAIN } fl_cfg_run_target_on;
typedef enum { FL_CFG_PRESET_NONE, FL_CFG_PRESET_NATURE, FL_CFG_PRESET_MACHADO } fl_cfg_env_preset;
typedef enum { FL_CFG_EVERY_SECONDS, FL_CFG_EVERY_LEARNER_STEPS } fl_cfg_eval_every_unit;
typedef enum { FL_CFG_KERNELS_AUTO, FL_CFG_KERNELS_DNNL, FL_CFG_KERNELS_REFERENCE, FL_CFG_KERNELS_ONEDNN } fl_cfg_model_cpu_kernels;

#define FL_CONFIG_KEYS(X)                                                                                   \
    /* [run] the experiment as a whole */                                                                   \
    X(run, name, STRING, "default", 0, 0, "", "experiment name; output goes to <out_dir>/<name>/")          \
    X(run, seed, INT, 1, 0, 2147483647, "", "master seed; every env, actor and table derives its own")     \
    X(run, max_seconds, FLOAT, 300, 0, 1e9, "", "stop the fleet after this many seconds (0 = no limit)")    \
    X(run, max_env_steps, INT, 0, 0, 1000000000000000, "", "budget: stop the fleet (a normal end, exit 0) once the actors have taken this many env steps in all (0 = no limit; checked every run.progress_every)") \
    X(run, max_learner_steps, INT, 0, 0, 1000000000000000, "", "budget: stop the fleet (a normal end, exit 0) after this many learner steps (learner 0's with apex, the sum with gorila; 0 = no limit; checked every run.progress_every)") \
    X(run, target_return, FLOAT, 475, -1e12, 1e12, "", "stop when the headline return reaches this: an evaluation's mean, each evaluation counting as it comes (run.target_on = eval) or the mean of the last 100 training episodes (train)") \
    X(run, target_on, ENUM, "eval", 0, 0, "eval|train", "which return run.target_return applies to: the evaluators' greedy return, or the training episodes' (eval with run.evaluators = 0 falls back to train)") \
    X(run, evaluators, INT, 1, 0, 64, "", "evaluator processes: each plays eval.episodes episodes with the latest parameters every eval.every") \
    X(run, stop_at_target, BOOL, 1, 0, 1, "", "whether reaching run.target_return stops the fleet")         \
    X(run, deterministic, BOOL, 0, 0, 1, "", "the same config and seed give the same run bit for bit (learner checkpoints, evaluations): actors, replay, learner and evaluators go in lockstep rounds of actor.sync_every env steps per actor, the learner taking replay.samples_per_insert samples per transition of a round; slower (docs/design.md, \"Deterministic mode\"). Needs one replay shard, one apex learner on the CPU, eval.every_unit = learner_steps") \
    X(run, out_dir, STRING, "runs", 0, 0, "", "folder under which runs/<name>/ is written")                 \
    X(run, max_restarts, INT, 10, 0, 1000000, "", "`fleet run` (and, under mpirun, each rank) restarts a role process that dies; one that dies within 10 s of its start this many times in a row ends the run (its restarts wait 0.2 s, doubling to 30 s); 0 = a dead role ends the run") \
    X(run, checkpoints, BOOL, 1, 0, 1, "", "checkpoint the whole experiment (learner, replay shards, actors, evaluators, the launcher's figures) in run.checkpoint_dir, so that `fleet run --resume runs/<name>` continues it") \
    X(run, hang_s, FLOAT, 120, 0, 1e9, "", "`fleet run` kills and restarts a role that gave no sign of life this long: an actor, learner or evaluator without a report, a service without an answer to the launcher's Info, or any role stopped (SIGSTOP); its silence is reported at half of it (0 = off); an actor that joined (`fleet actor --join`) and is silent for half of it (30 s when off) counts as lost") \
    X(run, checkpoint_every, FLOAT, 300, 0, 1e9, "", "seconds between the learner's, the replay shards' and the gorila parameter-server shards' checkpoints while the run goes (0 = only when it stops)") \
    X(run, keep_checkpoints, INT, 3, 1, 1000, "", "learner checkpoints kept (learner-<i>.step-<N>.safetensors beside the latest, learner-<i>.safetensors)") \
    X(run, checkpoint_dir, STRING, "", 0, 0, "", "folder of the experiment's checkpoints; `fleet run` sets it to runs/<name>/checkpoints when run.checkpoints is on") \
    X(run, log_level, ENUM, "info", 0, 0, "debug|info|warn|error", "log verbosity of every role")           \
    X(run, progress_every, FLOAT, 1.0, 0.05, 3600, "", "seconds between progress lines and metrics rows")   \
    X(run, local_sockets, BOOL, 0, 0, 1, "", "`fleet run` on one machine: the services and the launcher's Control listen on unix sockets in <run>/sock/ (mode 0700: no other local user can connect) instead of TCP on run.bind_host (only while run.bind_host is 127.0.0.1); off by default: a CartPole fleet is 13% slower on them (docs/benchmarks.md)") \
    X(run, bind_host, STRING, "127.0.0.1", 0, 0, "", "address that services bind (port chosen by the OS)")  \
    X(run, interface, STRING, "", 0, 0, "", "under mpirun across hosts: the network interface whose IPv4 address services bind (empty = the first that is up and not loopback)") \
    X(run, tls_dir, STRING, "", 0, 0, "", "folder of the fleet's TLS certificates and tokens, made by `fleet certs DIR` (empty = none: plaintext without tokens, and services may bind only loopback or unix sockets; docs/security.md)") \
    X(run, insecure, BOOL, 0, 0, 1, "", "allow services to bind a non-loopback address without run.tls_dir: plaintext, no tokens, anyone who reaches a port may call it (a warning is printed)") \
    /* [env] the environment each actor steps */                                                           \
    X(env, name, STRING, "cartpole", 0, 0, "", "environment name (see `fleet env list`)")                   \
    X(env, plugin, STRING, "", 0, 0, "", "path of a shared object that provides env.name (empty = built-in)") \
    X(env, num_envs, INT, 4, 1, 4096, "", "environments stepped together by each actor")                    \
    X(env, max_episode_steps, INT, 0, 0, 1000000000, "", "truncate episodes after this many steps (0 = the env's own limit)") \
    X(env, sticky_actions, FLOAT, 0.1, 0, 1, "", "probability that an env repeats the previous action (envs that support it)") \
    X(env, difficulty_ramping, BOOL, 1, 0, 1, "", "games that support it speed up over an episode") \
    X(env, rng, ENUM, "fleet", 0, 0, "fleet|reference", "random generator of games that offer a reference-compatible one") \
    X(env, args, STRING, "", 0, 0, "", "free text handed to the env (plugins)") \
    X(env, reward_bound, FLOAT, 0, 0, 3e38, "", "the largest |reward| one step of the env can give, which bounds what the replay takes (replay.max_abs_reward, replay.max_priority) and what reports may claim; 0 = the built-in env's own (none for Atari's raw scores and plugins: set it for a plugin)") \
    X(env, wrappers, STRING, "", 0, 0, "", "Atari-style wrappers around the env, e.g. \"noop(30) frameskip(4) framestack(4)\" (docs/environments.md)") \
    X(env, preset, ENUM, "none", 0, 0, "none|nature|machado", "a standard Atari protocol for an atari-* env (docs/environments.md): nature (Nature DQN / Ape-X: no-op starts, frame skip 4 with max-pooling, 84x84, frame stack 4, reward clipping, episodic life and fire-on-reset for training, no sticky actions) or machado (Machado et al. 2018: sticky actions 0.25, the full action set, no episodic life); it sets env.wrappers and env.sticky_actions") \
    /* [eval] the evaluators' greedy evaluation */                                                          \
    X(eval, every, FLOAT, 1, 0.001, 1e12, "", "how often an evaluator evaluates the latest parameters, in eval.every_unit") \
    X(eval, every_unit, ENUM, "seconds", 0, 0, "seconds|learner_steps", "unit of eval.every") \
    X(eval, episodes, INT, 10, 1, 100000, "", "episodes per evaluation") \
    X(eval, epsilon, FLOAT, 0, 0, 1, "", "exploration epsilon of the evaluated policy (0 = greedy)") \
    X(eval, max_episode_steps, INT, 27000, 0, 1000000000, "", "an evaluation episode is cut after this many agent steps (0 = only the env's own limits)") \
    X(eval, parallel, INT, 16, 1, 1024, "", "episodes an evaluator plays side by side (one batched forward per step)") \
    X(eval, nice, INT, 10, 0, 19, "", "added to each evaluator process's niceness: it shares the cores with the actors (actor.nice), behind the learner (0 = the same priority as the learner)") \
    /* [actor] experience generation */                                                                     \
    X(actor, count, INT, 2, 1, 4096, "", "number of actor processes")                                      \
    X(actor, eps_base, FLOAT, 0.4, 0, 1, "", "epsilon_i = eps_base^(1 + eps_alpha * i/(N-1))")             \
    X(actor, eps_alpha, FLOAT, 7, 0, 100, "", "exponent spread of the per-actor epsilons")                 \
    X(actor, local_buffer, INT, 50, 1, 1000000, "", "transitions gathered before a streamed insert")        \
    X(actor, sync_every, INT, 400, 1, 1000000000, "", "env steps between parameter fetches")               \
    X(actor, fetch_bf16, BOOL, 0, 0, 1, "", "fetch parameters as bfloat16 (half the bytes; learners keep float32)") \
    X(actor, max_steps, INT, 0, 0, 1000000000000, "", "env steps after which an actor stops (0 = no limit)") \
    X(actor, nice, INT, 10, 0, 19, "", "added to each actor process's niceness: the learner, which sets a fleet's pace, gets a shared core first (0 = the same priority as the other roles)") \
    X(actor, sched_idle, BOOL, 0, 0, 1, "", "run each actor process under Linux's SCHED_IDLE policy: where the learner keeps every core busy, an actor never preempts its threads and runs in the time they leave (the replay's rate limit makes the learner wait when the actors fall behind): for fleets of many more actor processes than cores") \
    X(actor, max_joined, INT, 1024, 0, 1000000, "", "actors that may join the running fleet over the run besides actor.count (`fleet actor --join`; 0 = none may)") \
    X(actor, max_backlog_mb, FLOAT, 64, 0, 1e6, "", "MiB of unacknowledged transitions an actor keeps for resending while its replay shard is away; past it the oldest unsent are dropped and counted (0 = no bound)") \
    /* [replay] the prioritized replay service */                                                           \
    X(replay, shards, INT, 1, 1, 256, "", "number of replay shard processes")                              \
    X(replay, capacity, INT, 1000000, 1, 1000000000000, "", "transitions kept in total (FIFO eviction)")   \
    X(replay, alpha, FLOAT, 0.6, 0, 10, "", "priority exponent (0 = uniform sampling)")                    \
    X(replay, beta, FLOAT, 0.4, 0, 1, "", "importance-sampling exponent")                                  \
    X(replay, priority_eps, FLOAT, 1e-6, 0, 1, "", "added to |TD error| so that no item has zero priority") \
    X(replay, selector, ENUM, "prioritized", 0, 0, "prioritized|uniform|fifo", "how samples are chosen: proportional to priority^alpha, uniformly, or oldest first (a queue with max_times_sampled = 1)") \
    X(replay, max_times_sampled, INT, 0, 0, 2147483647, "", "remove an item once it has been sampled this many times (0 = never)") \
    X(replay, tree_rebuild_every, INT, 1048576, 0, 1000000000000, "", "priority updates between full sum-tree rebuilds (0 = never)") \
    X(replay, min_size_to_sample, INT, 1000, 1, 1000000000000, "", "transitions held before the learner may sample") \
    X(replay, samples_per_insert, FLOAT, 8, 0, 1e6, "",                                                   \
      "rate limit: sampled transitions per inserted one, kept within replay.rate_error_buffer (0 = off)") \
    X(replay, rate_error_buffer, FLOAT, 20000, 0, 1e12, "",                                                \
      "rate limit: how far (in sampled transitions) the ratio may drift before inserts or samples wait") \
    X(replay, checkpoint_dir, STRING, "", 0, 0, "", "folder of the shards' checkpoints shard-<id>.ckpt (empty = checkpoints off unless a Checkpoint call names a file)") \
    X(replay, frame_stack, INT, 0, 0, 64, "", "observations are this many frames on their last axis, each distinct frame stored once (0 = the env.wrappers framestack, 1 = none)") \
    X(replay, zstd_level, INT, 0, 0, 19, "", "compress every stored frame with zstd at this level (0 = off; replay/frames.h)") \
    X(replay, checkpoint_every, FLOAT, 0, 0, 1e9, "", "seconds between periodic checkpoints to replay.checkpoint_dir (0 = off)") \
    X(replay, wal, BOOL, 1, 0, 1, "", "write-ahead log of inserts in the shard's checkpoint folder (replay.checkpoint_dir, else run.checkpoint_dir), so that a killed shard restarts with every acknowledged item; off when the shard has no such folder") \
    X(replay, wal_fsync, BOOL, 0, 0, 1, "", "fdatasync the write-ahead log before acknowledging (0 = the page cache: survives a killed process, not a machine crash)") \
    X(replay, max_abs_reward, FLOAT, 0, 0, 3e38, "", "inserts with an n-step reward beyond +-this are refused (the actor reports it as its env's error); 0 = from the env's reward bound (env.reward_bound): the bound of one agent step times the n-step discount sum, or 1e6 when the env declares none") \
    X(replay, max_priority, FLOAT, 0, 0, 3e38, "", "inserted and updated priorities above this are refused (actors and learners send larger ones as this); 0 = from the env's reward bound R: the n-step reward bound plus (1 + gamma^n) R / (1 - gamma), the largest TD error of values within their bounds, or 1e6 when the env declares none") \
    X(replay, max_streams, INT, 16384, 1, 100000000, "", "insert streams a shard keeps resend records of (about 1.1 KB each); beyond them a new stream pushes out the least recently used record with no call open (refused only when every one has a call open)") \
    X(replay, stream_idle_s, FLOAT, 3600, 1, 1e9, "", "a stream's resend record unused for this long may be reclaimed: must exceed any actor's longest outage, or its resent batches go in twice") \
    /* [paramserver] the parameter service */                                                               \
    X(paramserver, shards, INT, 1, 1, 256, "", "number of parameter-server shard processes")               \
    X(paramserver, max_staleness, INT, 0, 0, 1000000000, "", "gorila: bound on a pushed gradient's staleness (held version - based_on_version) for drop, on the lead of the fastest learner's pushes over the slowest one's for wait (0 = no bound)") \
    X(paramserver, stale_policy, ENUM, "drop", 0, 0, "drop|wait", "gorila: pushes beyond paramserver.max_staleness are dropped, or the fast learner's reply waits for the slow ones (stale-synchronous parallel)") \
    X(paramserver, staleness_lr, BOOL, 0, 0, 1, "", "gorila: scale the learning rate of each push by 1/max(1, staleness)") \
    X(paramserver, wait_timeout_s, FLOAT, 30, 0, 1e6, "", "gorila, stale_policy = wait: longest a reply is held for slower learners (seconds)") \
    X(paramserver, max_version_step, INT, 4294967296, 1, 4611686018427387904, "", "a publish's version may be at most this far past the held one (a learner resumed from a checkpoint onto a fresh parameter server jumps by its checkpoint's version)") \
    X(paramserver, max_large_messages, INT, 2, 1, 1024, "", "requests of 16 MiB or more (publishes and pushes of big vectors) handled at once; more wait up to 2 s, then are refused") \
    /* [learner] training */                                                                                \
    X(learner, count, INT, 1, 1, 1024, "", "number of learner processes")                                  \
    X(learner, mode, ENUM, "apex", 0, 0, "apex|gorila", "who owns the optimizer: learners (apex) or parameter servers (gorila)") \
    X(learner, device, ENUM, "cpu", 0, 0, "cpu|cuda|auto", "where the learner trains")                      \
    X(learner, threads, INT, 1, 1, 256, "", "threads of a CPU learner's kernels (oneDNN's and OpenBLAS's)") \
    X(learner, flush_denormals, BOOL, 1, 0, 1, "", "a CPU learner's kernels flush denormal floats (below 1.2e-38) to 0, which many CPUs compute with 10-100x slower (Adam's moments of weights whose gradient stays 0 decay through them)") \
    X(learner, tf32, BOOL, 1, 0, 1, "", "GPU learner: TF32 tensor cores in matrix products and convolutions") \
    X(learner, cuda_graphs, BOOL, 1, 0, 1, "", "GPU learner: capture the update as a CUDA graph and replay it") \
    X(learner, cudnn_benchmark, BOOL, 0, 0, 1, "",                                                                \
      "GPU learner: pick the convolution algorithms by timing each on the GPU (PyTorch's cudnn.benchmark), "     \
      "instead of cuDNN's heuristics")                                                                          \
    X(learner, batch_size, INT, 128, 1, 65536, "", "transitions per sampled batch")                        \
    X(learner, optimizer, ENUM, "adam", 0, 0, "rmsprop|adam|sgd", "optimizer (rmsprop is centered)")     \
    X(learner, lr, FLOAT, 0.003, 0, 10, "", "learning rate")                                             \
    X(learner, rmsprop_decay, FLOAT, 0.95, 0, 1, "", "RMSProp decay of the squared-gradient averages")    \
    X(learner, rmsprop_eps, FLOAT, 1.5e-7, 0, 1, "", "RMSProp epsilon")                                    \
    X(learner, adam_beta1, FLOAT, 0.9, 0, 1, "", "Adam first-moment decay")                                \
    X(learner, adam_beta2, FLOAT, 0.999, 0, 1, "", "Adam second-moment decay")                             \
    X(learner, adam_eps, FLOAT, 1e-8, 0, 1, "", "Adam epsilon")                                            \
    X(learner, momentum, FLOAT, 0.9, 0, 1, "", "SGD momentum")                                             \
    X(learner, grad_clip, FLOAT, 10, 0, 1e12, "", "clip the global gradient norm to this (0 = off)")       \
    X(learner, huber_delta, FLOAT, 1.0, 1e-6, 1e6, "", "Huber loss threshold")                             \
    X(learner, gamma, FLOAT, 0.99, 0, 1, "", "discount per env step")                                      \
    X(learner, n_step, INT, 3, 1, 1000, "", "steps in the multi-step return (actors build them)")          \
    X(learner, target_update, INT, 200, 1, 1000000000, "", "learner steps between target-network copies") \
    X(learner, publish_every, INT, 10, 1, 1000000000, "", "learner steps between parameter publishes")     \
    X(learner, checkpoint_dir, STRING, "", 0, 0, "", "folder of the learner checkpoints learner-<index>.safetensors, created when missing (empty = none); `fleet eval` finds RUN_DIR/checkpoints/ or this folder") \
    X(learner, checkpoint_every, INT, 0, 0, 1000000000000, "", "learner steps between checkpoints to learner.checkpoint_dir (0 = only when the learner stops)") \
    X(learner, resume, STRING, "", 0, 0, "", "a learner checkpoint (.safetensors) to continue from (empty = start fresh; `fleet learner --resume FILE` overrides)") \
    X(learner, prefetch, INT, 2, 0, 64, "", "Sample calls kept in flight while training (0 = sample synchronously)") \
    X(learner, batches_per_call, INT, 1, 1, 16, "", "batches each prefetch thread draws in one Sample call (with learner.prefetch > 0; the call's batches share its importance-weight normalisation; fewer calls spare the replay shard and the learner per-call work)") \
    X(learner, max_steps, INT, 0, 0, 1000000000000, "", "learner steps after which it stops (0 = no limit)") \
    X(learner, fetch_every, INT, 1, 1, 1000000000, "", "gorila: learner steps between parameter fetches") \
    X(learner, push_1bit, BOOL, 0, 0, 1, "", "gorila: push gradients as 1-bit signs with error feedback (~32x fewer bytes)") \
    X(learner, slow_push_ms, INT, 0, 0, 600000, "", "gorila: the last learner sleeps this long before each push (a deliberately slow learner, to test the staleness rules)") \
    /* [model] the Q-network */                                                                             \
    X(model, input_scale, FLOAT, 1, 1e-6, 1e6, "", "multiplies observations on their way into the network, after uint8 ones are scaled by 1/255 (255: 0/1 planes such as MinAtar's reach it as 0/1)") \
    X(model, cpu_kernels, ENUM, "auto", 0, 0, "auto|dnnl|reference|onednn", "kernels of the networks run on the CPU (learner, actors, evaluators): dnnl = oneDNN's primitives with fleet's own AVX2/AVX-512/AMX kernels where they win; onednn = oneDNN's primitives alone (fleet's own kernels off, to compare); reference = fleet's plain-C/OpenBLAS kernels both are tested against; auto = dnnl when fleet was built with oneDNN") \
    X(model, spec, STRING, "dense(128) relu dense(128) relu dueling", 0, 0, "",                            \
      "layers, left to right; a final `dueling` or dense(num_actions) head is the output")

/* clang-format on */

#endif
