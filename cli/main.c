/* fleet: the command. One binary, one verb per role:
 *   fleet run [CONFIG] [--set k=v]...     launch and supervise a whole fleet
 *   fleet replay | paramserver | actor | learner | evaluator ...   run one role (the launcher starts these)
 *   fleet env list|check|bench|play|record   inspect and check environments, built-in or plugins
 *   fleet plot RUN_DIR                    draw a run's learning curve (curve.png, with gnuplot)
 *   fleet eval RUN_DIR|CHECKPOINT         play and measure a trained agent, or record it
 *   fleet certs DIR                       make a fleet's TLS credentials (run.tls_dir)
 *   fleet version | help [VERB]
 * Every role verb takes --config FILE and --set section.key=value; the rest of its
 * options are listed by `fleet help VERB`. Exit codes: 0 success, 1 runtime failure,
 * 2 usage or configuration error. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/verbs.h"
#include "cli/heap.h"
#include "common/config.h"
#include "common/suggest.h"
#include "common/rpc.h"

#ifndef FLEET_VERSION
#define FLEET_VERSION "0.0.0"
#endif

typedef struct verb {
    const char *name;
    const char *summary;
    const char *help;
    int (*main)(int argc, char **argv);
} verb_t;

#define COMMON_OPTS                                                                                   \
    "  --config FILE            read an experiment's INI file (sections [run] [env] [eval] [actor]\n" \
    "                           [replay] [paramserver] [learner] [model]); every key has a default\n" \
    "  --set SECTION.KEY=VALUE  override one key (repeatable; applied after --config)\n"              \
    "  --help                   this text\n"                                                          \
    "`fleet help config` lists every key with its default and accepted range.\n"

#define SERVICE_OPTS                                                                                       \
    "  --listen ADDR            address to bind: HOST:PORT (PORT 0 = the OS chooses) or unix:/PATH\n"      \
    "                           (default: run.bind_host with port 0); an address other than loopback\n"    \
    "                           needs run.tls_dir (or run.insecure; docs/security.md)\n"                   \
    "  --shard N                this shard's index (default 0)\n"                                          \
    "  --ready-fd FD            write the bound address and a newline to FD once serving, then close it\n" \
    "  --control ADDR           the launcher's Control service to report to (optional)\n"

/* The verbs and their help texts, laid out as they print: */
/* clang-format off */
static const verb_t verbs[] = {
    {"run", "launch a whole fleet (on this machine, or under mpirun on many) and supervise it",
     "usage: fleet run [CONFIG.ini] [--config FILE] [--set SECTION.KEY=VALUE]...\n"
     "       fleet run --resume runs/NAME [--set SECTION.KEY=VALUE]...\n"
     "       mpirun -np K fleet run CONFIG.ini        (a fleet across hosts; docs/multi-host.md)\n"
     "Reads the experiment, prints the role plan, starts every role as its own process (replay\n"
     "shards, parameter servers, learners, actors, evaluators) talking gRPC over loopback, every\n"
     "call with the run's access token (runs/<name>/access.token, 0600: another local process\n"
     "without it is refused; with run.local_sockets = true: unix sockets in runs/<name>/sock/,\n"
     "mode 0700, which no other local user can connect to), prints one progress line per\n"
     "run.progress_every seconds and writes\n"
     "runs/<name>/ (config.ini, metrics.csv, evals.csv, returns.csv, roles.csv, TensorBoard\n"
     "events, curve.png, logs/, events.log, checkpoints/, summary.txt; an existing name gets\n"
     "runs/<name>-2/). Stops on Ctrl-C /\n"
     "SIGTERM, at run.max_seconds, run.max_env_steps or run.max_learner_steps, or when the\n"
     "evaluation return reaches run.target_return. A role process that dies is reported with its\n"
     "role and exit status and restarted (from its checkpoint where it has one); one that dies\n"
     "within 10 s of its start run.max_restarts times in a row ends the run (0: any death does).\n"
     "A role that crashes (SIGSEGV, SIGABRT, ...) leaves its signal and a backtrace in its log and\n"
     "events.log; a run that ends normally after a crash exits with status 3 (summary.txt:\n"
     "crashes=). One that gives no sign of life for run.hang_s (no report; a service: no answer\n"
     "to the launcher's Info; or stopped) is killed and restarted (hangs=).\n"
     "The roles' reports steer the run (evaluations, budgets): the launcher accepts one only from\n"
     "the process it started for that role and index (its FLEET_CREDENTIAL, under a secret of this\n"
     "run) and with figures that can be true; it logs what it refuses (docs/security.md).\n"
     "  --resume DIR             continue the run in DIR from its checkpoints (its config.ini, then\n"
     "                           --set overrides): learner, replay, actors' and evaluators' counters\n"
     "                           and generators, the metrics files (appended)\n"
     "Options:\n" COMMON_OPTS
     "  --dry-run                print the role plan and the effective config, start nothing\n"
     "  --print-mpirun           print the mpirun command (rank count) for this config\n"
     "  --hostfile FILE          with --print-mpirun: the Open MPI hostfile to name\n"
     "  --role ROLE              under mpirun, MPMD form: this app context's role (launcher, replay,\n"
     "                           paramserver, learner, actor); the counts then come from the ranks\n",
     fl_verb_run},
    {"suite", "run one experiment over several seeds and write its results table and curves",
     "usage: fleet suite [CONFIG.ini] [--seeds LIST] [--parallel N] [--config FILE] [--set SECTION.KEY=VALUE]...\n"
     "Runs the experiment once per seed, each a whole `fleet run` with run.seed = that seed, one after\n"
     "another or N at a time, into <run.out_dir>/<run.name>-suite/ (-suite-2, ... when it exists):\n"
     "config.ini (the effective config, --set included), seed-S/ (each run's folder) and seed-S.log\n"
     "(its terminal output). When they have ended it writes results.csv (a row per seed: outcome, time,\n"
     "env steps, final and best greedy evaluation return, time and env steps to run.target_return),\n"
     "summary.md (that table; the final return's mean, std and 95% confidence interval over the seeds;\n"
     "the median time and env steps to the target) and curves.png (titled with run.name: every seed's\n"
     "evaluation return against env steps, their mean over its 95% confidence band, Student's t, whose\n"
     "figures are in curves.csv; with gnuplot; curves.gp redraws it), and prints the table. Ctrl-C starts no\n"
     "further seed and stops the runs under way. Exit 0 when every run ended normally, else 1.\n"
     "  --seeds LIST             seeds and ranges, e.g. 1,2,3 or 1-10 (default 1,2,3)\n"
     "  --parallel N             runs at a time (default 1; each run is a whole fleet of processes)\n"
     "Options:\n" COMMON_OPTS,
     fl_verb_suite},
    {"replay", "serve one prioritized replay shard",
     "usage: fleet replay [--listen ADDR] [--shard N] [--ready-fd FD] [--control ADDR] [--restore PATH] [--config FILE] [--set K=V]...\n"
     "Serves fleet.Replay (Insert, Sample, UpdatePriorities, Info, Checkpoint) for one shard whose\n"
     "table holds replay.capacity / replay.shards transitions of env.name's observations.\n"
     "Checkpoint writes the whole table to replay.checkpoint_dir/shard-<N>.ckpt, or to the file the call\n"
     "names inside that folder (a plain name ending in .ckpt: no folders; at most 4 such named files,\n"
     "see docs/security.md); without\n"
     "replay.checkpoint_dir the call is refused. replay.checkpoint_every > 0 writes the default file\n"
     "periodically.\n"
     "Options:\n" SERVICE_OPTS
     "  --restore PATH           start from the checkpoint PATH (its table's signature must match the config)\n"
     COMMON_OPTS,
     fl_verb_replay},
    {"paramserver", "serve the latest parameters (one shard)",
     "usage: fleet paramserver [--listen ADDR] [--shard N] [--ready-fd FD] [--control ADDR] [--restore FILE] [--config FILE] [--set K=V]...\n"
     "Serves fleet.ParamServer (Publish, Fetch, Info): the latest flat parameter vector and its\n"
     "version; Fetch(if_newer_than) answers without a payload when the caller is up to date.\n"
     "Options:\n" SERVICE_OPTS
     "  --restore FILE           gorila: start from the shard checkpoint FILE (paramserver-<shard>.safetensors;\n"
     "                           its slice and optimizer settings must match the config)\n" COMMON_OPTS,
     fl_verb_paramserver},
    {"actor", "step environments and stream experience to replay",
     "usage: fleet actor --index I --replay ADDRS --paramserver ADDR [--control ADDR] [--config FILE] [--set K=V]...\n"
     "       fleet actor --join RUN_DIR|HOST:PORT [--set K=V]...\n"
     "Runs env.num_envs copies of env.name with epsilon_I = actor.eps_base^(1 + actor.eps_alpha*I/(N-1)),\n"
     "builds learner.n_step transitions with initial priorities from its local Q-network,\n"
     "streams them to replay every actor.local_buffer transitions and fetches parameters\n"
     "every actor.sync_every env steps.\n"
     "Options:\n"
     "  --index I                this actor's index in [0, actor.count)\n"
     "  --replay ADDRS           the replay shards (HOST:PORT or unix:/PATH), comma-separated in shard order,\n"
     "                           or @FILE with one per line; actor I writes to shard I mod replay.shards\n"
     "  --paramserver ADDR       the parameter server\n"
     "  --control ADDR           the launcher's Control service (optional)\n"
     "  --resume                 continue from run.checkpoint_dir/actor-I.state (counters, generators)\n"
     "  --join RUN_DIR|HOST:PORT join a running fleet: its launcher gives the index (actor.count and up), epsilon,\n"
     "                           credential, addresses and config (--set overrides it for this actor). RUN_DIR:\n"
     "                           runs/NAME on the launcher's host (control.addr, access.token or tls/); from\n"
     "                           another host the launcher's address with --set run.tls_dir=DIR (docs/multi-host.md)\n"
     COMMON_OPTS,
     fl_verb_actor},
    {"learner", "train the Q-network from replay and publish parameters",
     "usage: fleet learner --replay ADDRS --paramserver ADDR [--index I] [--control ADDR] [--config FILE] [--set K=V]...\n"
     "Waits for replay.min_size_to_sample transitions, then samples learner.batch_size batches,\n"
     "takes double-DQN n-step steps with importance-weighted Huber loss, sends priorities back,\n"
     "copies the target network every learner.target_update steps and publishes parameters every\n"
     "learner.publish_every steps.\n"
     "Options:\n"
     "  --index I                this learner's index (default 0)\n"
     "  --replay ADDRS           the replay shards, comma-separated in shard order, or @FILE; each batch is\n"
     "                           split across shards by their priority mass (a draw from the global distribution)\n"
     "  --paramserver ADDR       the parameter server\n"
     "  --control ADDR           the launcher's Control service (optional)\n" COMMON_OPTS,
     fl_verb_learner},
    {"evaluator", "evaluate the latest parameters with greedy episodes",
     "usage: fleet evaluator --paramserver ADDR [--index I] [--control ADDR] [--replay ADDR] [--config FILE] [--set K=V]...\n"
     "Every eval.every (eval.every_unit: seconds, or the fleet's learner steps as the launcher reports\n"
     "them) fetches the latest parameters, plays eval.episodes episodes of env.name with\n"
     "epsilon = eval.epsilon on its own env seeds (eval.parallel side by side, each cut after\n"
     "eval.max_episode_steps) and reports mean, std, 95% CI, min and max of return and length.\n"
     "Options:\n"
     "  --index I                this evaluator's index in [0, run.evaluators) (default 0)\n"
     "  --paramserver ADDR       the parameter server (shards comma-separated, in shard order)\n"
     "  --control ADDR           the launcher's Control service (optional with eval.every_unit = seconds)\n"
     "  --replay ADDR            run.deterministic: the replay shard, where the evaluator marks its rounds\n"
     "  --resume                 continue from run.checkpoint_dir/evaluator-I.state (rounds, seeds)\n"
     COMMON_OPTS,
     fl_verb_evaluator},
    {"env", "inspect and check environments",
     "usage: fleet env list [--plugin PATH]\n"
     "  list                     every built-in environment with its observation and action spaces; with\n"
     "                           --plugin PATH the plugin's env alone (the one env.name it allows)\n"
     "       fleet env check NAME [--episodes N] [--steps N] [env options]\n"
     "       fleet env check --plugin PATH [NAME] [--episodes N] [--steps N] [env options]\n"
     "  check                    does the env keep the contract of <fleet/env.h>? Plays N episodes of random\n"
     "                           actions (default 5, each cut at --steps, default 1000) three times, as a\n"
     "                           run's actors step them (env.max_episode_steps as truncation, a run's [env]\n"
     "                           defaults, instance 0 of --seed): observations finite and within their\n"
     "                           size, *terminated 0 or 1, rewards finite, the state within state_size, how\n"
     "                           episodes ended; the same seed twice gives the same trajectory byte for\n"
     "                           byte (another seed a different one, or a warning); render writes exactly\n"
     "                           its declared image; action_name names every action; configure takes the\n"
     "                           options; steps/s. One PASS/WARN/FAIL line per check (SKIP for what the env\n"
     "                           lacks), each naming the field and value. Exit 0 when none failed, 1 when\n"
     "                           one did (or the env crashed), 2 when the env does not load or an option is\n"
     "                           wrong\n"
     "       fleet env bench [NAME...|--all] [--plugin PATH] [--steps N] [--envs K] [--json]\n"
     "  bench                    raw steps/s of each named env on one core with random actions: one\n"
     "                           instance, then an fl_vecenv of K instances; with no name one env of each\n"
     "                           family (cartpole, minatar-breakout, three Atari games), at most 3 s a case;\n"
     "                           --all every built-in (hours: 104 Atari games); --plugin PATH: the plugin's\n"
     "                           env too, as a named one (alone when no name is given)\n"
     "  --steps N                env steps per case (default 1000000)\n"
     "  --envs K                 instances in the vectorized case (default 16)\n"
     "  --json                   one JSON object per case: {\"bench\":\"env\",\"case\":\"NAME/single\",...}\n"
     "       fleet env play NAME [--plain] [--width COLS] [env options]\n"
     "  play                     step the env with the keyboard, one key per step, drawn in the terminal\n"
     "                           (24-bit colour; --plain: characters); an env without render shows its\n"
     "                           observation as text (numbers, or a character a cell of a grid). Arrows/wasd\n"
     "                           move, space fires, '.'/Enter noop, a digit picks an action by index, r\n"
     "                           resets, q quits. Keys come from stdin, so `printf 'ddd q' | fleet env play\n"
     "                           ...` scripts it\n"
     "  --width COLS             text columns of the picture (default: the terminal's, at most 80)\n"
     "       fleet env record NAME --out FILE.gif|FILE.mp4|FILE.png [--steps N] [--frames K] [--columns C]\n"
     "                        [--scale S] [--delay CS] [env options]\n"
     "       fleet env record [NAME] --checkpoint RUN_DIR|CHECKPOINT --out FILE [--epsilon E] [--config FILE]\n"
     "                        [--set K=V]... [record and env options]\n"
     "  record                   one episode of random actions, or with --checkpoint the trained agent's (as\n"
     "                           `fleet eval` finds it: the run's config.ini and checkpoint; env and model from\n"
     "                           that config, the env options given here and --set override it; --epsilon E\n"
     "                           or eval.epsilon (0: greedy); --seed or run.seed, like `fleet eval`'s episode 0), as an\n"
     "                           animated GIF, an MP4 video (needs ffmpeg on PATH) or a PNG strip of K frames\n"
     "                           evenly spaced over the episode\n"
     "  --steps N                at most N steps (default 1000)\n"
     "  --frames K               frames in a PNG strip (default 16), laid out C per row (--columns, default 8)\n"
     "  --scale S                enlarge each frame S times (default 1); --delay CS: GIF frame delay, MP4 at\n"
     "                           100/CS frames per second (default 8)\n"
     " env options (check, play and record):\n"
     "  --plugin PATH            load the env from a plugin shared object (see docs/custom-envs.md)\n"
     "  --args TEXT              env.args for the env; --seed N: the seed (default 1)\n"
     "  --sticky P               sticky-action probability (play default 0, check and record default 0.1;\n"
     "                           with --checkpoint the run's env.sticky_actions)\n"
     "  --ramping 0|1            difficulty ramping (default 1); --rng fleet|reference: the MinAtar generator\n",
     fl_verb_env},
    {"plot", "draw a run's learning curve, RUN_DIR/curve.png, with gnuplot",
     "usage: fleet plot RUN_DIR\n"
     "Draws RUN_DIR/curve.png now, the picture `fleet run` keeps up to date while it runs: x the whole\n"
     "fleet's env steps, y the return; the greedy evaluations of evals.csv as a thick line (their mean)\n"
     "over a band from their min to their max return, and one thin line per actor for the training\n"
     "returns of returns.csv, labelled with the actor's epsilon (8 evenly spaced actors when there are\n"
     "more). Also writes RUN_DIR/curve.gp, the gnuplot script that drew it: `gnuplot curve.gp` in\n"
     "RUN_DIR draws it again (restyle a copy: a running fleet rewrites curve.gp). Prints the path.\n"
     "Needs gnuplot on PATH (Debian: gnuplot-nox; scripts/setup.sh installs it). Exit 1 when it is\n"
     "missing, when RUN_DIR has neither evals.csv nor returns.csv or no rows yet, or when gnuplot fails\n"
     "or takes over 60 s.\n",
     fl_verb_plot},
    {"eval", "play a trained agent's episodes from a run folder or checkpoint; record one",
     "usage: fleet eval RUN_DIR|CHECKPOINT [--final] [--episodes N] [--epsilon E] [--seed S] [--max-steps N]\n"
     "                  [--parallel P]\n"
     "                  [--record FILE.gif|FILE.mp4|FILE.png] [--scale S] [--frames K] [--columns C] [--delay CS]\n"
     "                  [--json] [--progress S] [--config FILE] [--set SECTION.KEY=VALUE]...\n"
     "Loads the online network of a learner checkpoint, plays N episodes with its epsilon-greedy policy\n"
     "(episode k on stream k of the seed, P side by side) and prints the checkpoint and config used, the\n"
     "env, the checkpoint's learner steps (a warning when it is 0: an untrained network), then the return's mean +- the half-width of its 95% confidence interval (Student's t with N-1\n"
     "degrees of freedom), std, min and max, the length's mean, min and max, the truncated episodes, the\n"
     "agent steps and the seconds taken.\n"
     "RUN_DIR (runs/NAME/ of `fleet run`): its config.ini, and the parameters of its best evaluation\n"
     "(RUN_DIR/checkpoints/best-<i>.safetensors, written by evaluator i whenever it beats its best),\n"
     "else, or with --final, the learner's last checkpoint RUN_DIR/checkpoints/learner-0.safetensors (runs\n"
     "write it every run.checkpoint_every seconds and at their end), else\n"
     "<learner.checkpoint_dir>/learner-0.safetensors; the line `which` says which. A `fleet suite` folder holds one run per seed: name\n"
     "one, e.g. SUITE/seed-1. CHECKPOINT (either .safetensors file): config.ini from its folder or\n"
     "the folder above. --config FILE replaces that config; --set overrides apply after it (e.g. --set\n"
     "env.sticky_actions=0). Env, wrappers and model come from the config.\n"
     "Options:\n"
     "  --episodes N             episodes to play (default eval.episodes)\n"
     "  --epsilon E              exploration epsilon in [0, 1] (default eval.epsilon; 0 = greedy)\n"
     "  --seed S                 seed of the env and exploration streams (default run.seed)\n"
     "  --max-steps N            cut an episode after N agent steps (default eval.max_episode_steps; 0 = the\n"
     "                           env's own limits)\n"
     "  --parallel P             episodes played side by side (default eval.parallel)\n"
     "  --record FILE            record episode 0: .gif (animation), .mp4 (video; needs ffmpeg on PATH,\n"
     "                           Debian: apt-get install ffmpeg) or .png (a strip of K evenly spaced frames;\n"
     "                           the episodes are played twice, the second time to pick the frames)\n"
     "  --scale S                enlarge each frame S times (default 1)\n"
     "  --frames K, --columns C  PNG strip: K frames (default 16), C per row (default 8)\n"
     "  --delay CS               GIF frame delay in hundredths of a second, MP4 at 100/CS fps (default 8)\n"
     "  --json                   print one JSON object: every statistic, each episode's return and length\n"
     "  --progress S             a progress line on stderr every S seconds while playing (default 10; 0 = none)\n"
     "  --final                  play the learner's last checkpoint, not the best evaluation's parameters\n"
     "  --config FILE, --set SECTION.KEY=VALUE   as for every verb (`fleet help config`)\n"
     "Exit 0; 1 when playing or recording fails (or .mp4 without ffmpeg); 2 for usage and configuration\n"
     "errors: no such folder, a suite folder, no config or checkpoint found, a file that is not a learner\n"
     "checkpoint, a checkpoint of another model.spec.\n",
     fl_verb_eval},
    {"certs", "make a fleet's TLS certificates and tokens (for run.tls_dir)",
     "usage: fleet certs DIR [--hosts h1,h2,...] [--days N]\n"
     "Makes DIR (mode 0700) with a fleet's credentials, using the openssl command (Debian: openssl):\n"
     "  ca.pem, ca.key           the fleet's own certificate authority (no role reads ca.key)\n"
     "  fleet.pem, fleet.key     the certificate every service presents, signed by ca.pem, valid for\n"
     "                           127.0.0.1, ::1, localhost, this host's name and the --hosts\n"
     "  token                    the run token: every role sends it, every service requires it\n"
     "  learner.token            the learner token: also allows publishing parameters and pushing\n"
     "                           gradients (only `fleet learner` and the parameter servers read it)\n"
     "Keys and tokens are 0600. Then run the fleet with --set run.tls_dir=DIR: every service speaks TLS\n"
     "and refuses calls without the token; docs/security.md has the trust model. Refuses a DIR that\n"
     "holds credentials already.\n"
     "  --hosts h1,h2,...        more host names or addresses the services are dialled by (every host\n"
     "                           of a multi-host fleet, by the name or address its services bind)\n"
     "  --days N                 validity of the certificates (default 365)\n",
     fl_verb_certs},
    {"version", "print the version", "usage: fleet version\n", NULL},
    {"help", "help on a verb, or `fleet help config [SECTION|KEY|WORD]` for the configuration keys",
     "usage: fleet help [VERB | config [SECTION | SECTION.KEY | WORD]]\n"
     "`fleet help VERB` documents a verb; `fleet help config` lists every configuration key with its type,\n"
     "default, accepted values and meaning; with a section (eval), a key (learner.lr) or a word in key names\n"
     "(checkpoint) only those.\n",
     NULL},
};
/* clang-format on */

#define NVERBS (int)(sizeof verbs / sizeof verbs[0])

static void usage(FILE *f) {
    fprintf(f, "usage: fleet VERB [options]\n\nverbs:\n");
    for (int i = 0; i < NVERBS; i++) fprintf(f, "  %-12s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\n`fleet help VERB` documents a verb's options.\n");
}

static const verb_t *find_verb(const char *name) {
    for (int i = 0; i < NVERBS; i++)
        if (strcmp(verbs[i].name, name) == 0) return &verbs[i];
    return NULL;
}

/* " (did you mean 'run'?)" for a name close to a verb's, else "". */
static const char *verb_hint(const char *name, char *buf, size_t len) {
    fl_suggest_t sg;
    fl_suggest_init(&sg, name, strlen(name) >= 6 ? strlen(name) / 3 : 2);
    for (int i = 0; i < NVERBS; i++) fl_suggest_consider(&sg, verbs[i].name);
    buf[0] = '\0';
    if (sg.best) snprintf(buf, len, " (did you mean '%s'?)", sg.best);
    return buf;
}

int main(int argc, char **argv) {
    mallopt(M_MMAP_THRESHOLD, (int)FL_MALLOC_KEEP);
    mallopt(M_TRIM_THRESHOLD, (int)FL_MALLOC_KEEP);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0) {
        printf("fleet %s\n", FLEET_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[2], "config") == 0) {
            const char *only = argc > 3 ? argv[3] : NULL;
            if (fl_config_print_help_of(stdout, only) > 0) return 0;
            char sections[256];
            fl_config_sections(sections, sizeof sections);
            fprintf(stderr,
                    "fleet help config: no section or key matches '%s' (expected a section: %s; a key such "
                    "as learner.lr; or a word in key names, e.g. checkpoint)\n",
                    only, sections);
            return 2;
        }
        const verb_t *v = find_verb(argv[2]);
        if (!v) {
            char hint[64];
            fprintf(stderr, "fleet help: unknown verb '%s'%s\n", argv[2], verb_hint(argv[2], hint, sizeof hint));
            usage(stderr);
            return 2;
        }
        fputs(v->help, stdout);
        return 0;
    }
    const verb_t *v = find_verb(name);
    if (!v) {
        char hint[64];
        fprintf(stderr, "fleet: unknown verb '%s'%s\n", name, verb_hint(name, hint, sizeof hint));
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(v->help, stdout);
            return 0;
        }
    }
    if (!v->main) {
        fprintf(stderr, "fleet %s: this verb takes no options\n", name);
        return 2;
    }
    /* A role `fleet run` started (or a tool of the run's user) calls and serves with the
     * run's access token (common/rpc.h). */
    const char *access = getenv(FL_RPC_ACCESS_ENV);
    if (access && access[0]) {
        fl_err_t err;
        fl_err_init(&err);
        if (fl_rpc_set_access_token(access, &err) != FL_OK) {
            fprintf(stderr, "fleet %s: %s: %s\n", name, FL_RPC_ACCESS_ENV, err.msg);
            return 2;
        }
    }
    /* The verb sees argv from its own name on: argv[0] = "run", ... */
    int rc = v->main(argc - 1, argv + 1);
    /* Under mpirun every rank ends the same way: one hint, from rank 0. A role that a
     * launcher started (with --control) gets none: its user typed the launcher's
     * command, and the launcher says why the role stopped. */
    const char *mpi_rank = getenv("OMPI_COMM_WORLD_RANK");
    int launched = 0;
    for (int i = 2; i < argc; i++) launched |= strcmp(argv[i], "--control") == 0;
    if (rc == 2 && !launched && (!mpi_rank || strcmp(mpi_rank, "0") == 0))
        fprintf(stderr, "(`fleet help %s` lists the options)\n", name);
    return rc;
}
