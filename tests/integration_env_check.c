/* `fleet env check`, and `--plugin` for `fleet env list`, `bench` and `play`, through the
 * real binary, with plugins compiled here at test time:
 *  - the check passes on built-ins (CartPole, MinAtar Breakout) and on the complete game
 *    of docs/custom-envs.md, whose listing must be examples/catch/catch.c byte for byte;
 *    that listing is built with the page's own `cc` line against the header `cmake
 *    --install` puts under $HOME/.local, checked with the page's `fleet env check` line and
 *    trained with its `fleet run` command, to the target it sets;
 *  - the check fails, exit status 1, with a line naming the field, the value and the step,
 *    on broken plugins: a NaN observation, a terminal flag of 2, an unseeded rand(), an
 *    image larger than render_height x render_width declares, a crash in step;
 *  - usage and loading errors exit 2;
 *  - list and bench take --plugin; play prints the observation of an env without render;
 *  - a plugin of ABI version 2 (whose definition ends before close) is checked too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/proc_util.h"

static char g_dir[64];

static const char *compiler(void) {
    const char *c = getenv("FLEET_CC");
    return c && c[0] ? c : "cc";
}

/* One source, a variant a macro: V=0 keeps the contract (and renders unless NORENDER). */
static const char *const broken_src =
    "#include <fleet/env.h>\n"
    "#include <math.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef struct { int pos, t; } st_t;\n"
    "static void wr(const st_t *s, float *obs) { obs[0] = (float)s->pos; obs[1] = (float)s->t; obs[2] = 0.5f; }\n"
    "static void reset(void *state, fl_rng_t *rng, void *obs) {\n"
    "    st_t *s = state;\n"
    "    s->pos = (int)fl_env_rng_below(rng, 5);\n"
    "    s->t = 0;\n"
    "#if V == 3\n"
    "    s->pos = rand() % 5;\n"
    "#endif\n"
    "    wr(s, obs);\n"
    "}\n"
    "static void step(void *state, fl_rng_t *rng, int a, void *obs, float *r, int *term) {\n"
    "    (void)rng;\n"
    "    st_t *s = state;\n"
    "    s->pos += a ? 1 : -1;\n"
    "    s->t++;\n"
    "    *r = s->pos == 9 ? 1.0f : 0.0f;\n"
    "    *term = s->pos == 9 || s->pos < -5;\n"
    "    wr(s, obs);\n"
    "#if V == 1\n"
    "    if (s->t == 3) ((float *)obs)[1] = NAN;\n"
    "#endif\n"
    "#if V == 2\n"
    "    if (*term) *term = 2;\n"
    "#endif\n"
    "#if V == 5\n"
    "    if (s->t == 4) raise_segv();\n"
    "#endif\n"
    "}\n"
    "#ifndef NORENDER\n"
    "static void render(const void *state, uint8_t *rgb) {\n"
    "    (void)state;\n"
    "    memset(rgb, 9, 10 * 12 * 3 + (V == 4 ? 24 : 0));\n"
    "}\n"
    "#endif\n"
    "#ifdef ABI2 /* a definition of version 2, which ends before close */\n"
    "typedef struct {\n"
    "    int abi_version; const char *name, *description; fl_obs_spec_t obs; int num_actions, max_episode_steps;\n"
    "    size_t state_size; fl_env_reset_fn reset; fl_env_step_fn step; fl_env_render_fn render;\n"
    "    int render_height, render_width; fl_env_configure_fn configure; fl_env_action_name_fn action_name;\n"
    "} v2_def_t;\n"
    "static const v2_def_t def2 = {2, \"walk\", 0, {FL_DTYPE_FLOAT32, 1, {3}}, 2, 30, sizeof(st_t), reset, step,\n"
    "                              0, 0, 0, 0, 0};\n"
    "FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) { return (const fl_env_def_t *)(const void *)&def2; }\n"
    "#else\n"
    "static const fl_env_def_t def = {\n"
    "    .abi_version = FL_ENV_ABI_VERSION, .name = \"walk\", .obs = {FL_DTYPE_FLOAT32, 1, {3}},\n"
    "    .num_actions = 2, .max_episode_steps = 30, .state_size = sizeof(st_t), .reset = reset, .step = step,\n"
    "#ifndef NORENDER\n"
    "    .render = render, .render_height = 10, .render_width = 12,\n"
    "#endif\n"
    "};\n"
    "FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) { return &def; }\n"
    "#endif\n";

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-envcheck-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/walk.c", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    /* V == 5's crash: a write through a null pointer the compiler cannot see through. */
    fputs("static void raise_segv(void);\n", f);
    fputs(broken_src, f);
    fputs("static void raise_segv(void) { volatile int *volatile p = 0; *p = 1; }\n", f);
    fclose(f);
    static const struct {
        const char *out, *defs;
    } builds[] = {{"good", "-DV=0"},
                  {"nan", "-DV=1"},
                  {"term2", "-DV=2"},
                  {"rand", "-DV=3"},
                  {"render", "-DV=4"},
                  {"crash", "-DV=5"},
                  {"norender", "-DV=0 -DNORENDER"},
                  {"abi2", "-DV=0 -DNORENDER -DABI2"}};
    for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
        char *out;
        int rc = shell_in(g_dir, &out,
                          "%s -O1 -Wall -Werror -Wno-unused-function -shared -fPIC -I$S/include %s "
                          "walk.c -o %s.so",
                          compiler(), builds[i].defs, builds[i].out);
        free(out);
        if (rc != 0) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_rf(g_dir);
    return 0;
}

static void test_builtins_pass(void **state) {
    (void)state;
    const char *envs[] = {"cartpole", "minatar-breakout"};
    for (size_t i = 0; i < 2; i++) {
        char *out;
        assert_int_equal(shell_in(g_dir, &out, "$F env check %s", envs[i]), 0);
        assert_null(strstr(out, "FAIL"));
        assert_non_null(strstr(out, "PASS  observations"));
        assert_non_null(strstr(out, "PASS  reset/step"));
        assert_non_null(strstr(out, "PASS  episodes"));
        assert_non_null(strstr(out, "PASS  determinism"));
        assert_non_null(strstr(out, "PASS  seeds"));
        assert_non_null(strstr(out, "PASS  render"));
        assert_non_null(strstr(out, "PASS  action_name"));
        assert_non_null(strstr(out, "steps/s"));
        assert_non_null(strstr(out, "checks passed"));
        free(out);
    }
}

/* The text between `start` (included, when keep_start) and the next `end` in text, as a
 * new string; NULL when start is not found. */
static char *between(const char *text, const char *start, const char *end, int keep_start) {
    const char *a = strstr(text, start);
    if (!a) return NULL;
    if (!keep_start) a += strlen(start);
    const char *b = strstr(a, end);
    if (!b) return NULL;
    return strndup(a, (size_t)(b - a));
}

/* A command of the page: the line of a ```sh block that begins with `start`, with the
 * lines a trailing backslash continues; `fleet` at its start becomes $F, and `cc` the
 * build's compiler. */
static char *doc_command(const char *doc, const char *start) {
    char fenced[256];
    snprintf(fenced, sizeof fenced, "```sh\n%s", start);
    const char *a = strstr(doc, fenced);
    assert_non_null(a);
    a += 6;
    char *cmd = calloc(1, 4096);
    assert_non_null(cmd);
    size_t n = 0;
    if (strncmp(a, "fleet ", 6) == 0) {
        n += (size_t)snprintf(cmd, 4096, "$F ");
        a += 6;
    } else if (strncmp(a, "cc ", 3) == 0) {
        n += (size_t)snprintf(cmd, 4096, "%s ", compiler());
        a += 3;
    }
    while (*a && *a != '\n' && n < 4000) {
        if (a[0] == '\\' && a[1] == '\n') { /* a continued line: join it */
            a += 2;
            while (*a == ' ') a++;
            cmd[n++] = ' ';
            continue;
        }
        cmd[n++] = *a++;
    }
    return cmd;
}

/* docs/custom-envs.md's game, as the page says: its listing is examples/catch/catch.c; its
 * build line, against the header installed under $HOME/.local, builds it; its check passes;
 * its run command trains it to the target the command sets. */
static void test_docs_example(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/custom-envs.md", fleet_source_dir());
    char *doc = read_file(path);
    assert_non_null(doc);
    snprintf(path, sizeof path, "%s/examples/catch/catch.c", fleet_source_dir());
    char *example = read_file(path);
    assert_non_null(example);
    char *listing = between(doc, "```c\n/* catch:", "```\n", 1);
    assert_non_null(listing);
    memmove(listing, listing + 5, strlen(listing + 5) + 1); /* drop the fence "```c\n" */
    assert_string_equal(listing, example);

    char dir[256], *out;
    snprintf(dir, sizeof dir, "%s/doc", g_dir);
    snprintf(path, sizeof path, "%s/catch.c", dir);
    assert_int_equal(shell_in(g_dir, &out, "mkdir -p doc/home && cp $S/examples/catch/catch.c doc/"), 0);
    free(out);
    /* The header where section 1 installs it, $HOME/.local/include. */
    const char *bin_dir = getenv("FLEET_BINARY_DIR");
    assert_non_null(bin_dir);
    assert_int_equal(shell_in(dir, &out, "cmake --install '%s' --prefix %s/home/.local", bin_dir, dir), 0);
    free(out);
    char *build = doc_command(doc, "cc -O2 -shared -fPIC -I$HOME/.local/include catch.c");
    assert_non_null(strstr(build, "-o libcatch.so"));
    assert_int_equal(shell_in(dir, &out, "HOME=%s/home; %s", dir, build), 0);
    free(out);
    /* ... and it compiles warning-free, strictly. */
    assert_int_equal(shell_in(dir, &out,
                              "%s -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -I$S/include "
                              "catch.c",
                              compiler()),
                     0);
    free(out);

    char *check = doc_command(doc, "fleet env check catch --plugin ./libcatch.so");
    assert_int_equal(shell_in(dir, &out, "%s", check), 0);
    assert_null(strstr(out, "FAIL"));
    assert_null(strstr(out, "WARN"));
    assert_non_null(strstr(out, "PASS  determinism"));
    assert_non_null(strstr(out, "PASS  render        render_height 80 x render_width 40"));
    assert_non_null(strstr(out, "PASS  action_name   3 actions: left noop right"));
    assert_non_null(strstr(out, "fleet env check: catch: all 8 checks passed"));
    free(out);

    char *run = doc_command(doc, "fleet run --set env.plugin=./libcatch.so");
    assert_non_null(strstr(run, "run.name=catch"));
    assert_int_equal(shell_in(dir, &out, "%s --set run.max_seconds=120", run), 0);
    assert_non_null(strstr(out, "target reached"));
    free(out);
    snprintf(path, sizeof path, "%s/runs/catch/summary.txt", dir);
    char *sum = read_file(path);
    assert_non_null(sum); /* run.name named the folder */
    free(sum);
    free(build);
    free(check);
    free(run);
    free(listing);
    free(example);
    free(doc);
}

/* A broken plugin: exit status 1 and the FAIL line's text. */
static void expect_fail(const char *plugin, const char *line) {
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "$F env check walk --plugin ./%s.so", plugin), 1);
    assert_non_null(strstr(out, line));
    free(out);
}

static void test_broken_plugins_fail(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "$F env check --plugin ./good.so --episodes 3 --steps 50"), 0);
    assert_null(strstr(out, "FAIL"));
    assert_non_null(strstr(out, "3 episodes of random actions, each cut at 50 steps"));
    free(out);
    expect_fail("nan", "FAIL  observations  obs[1] is nan at episode 1, step 3, expected a finite float32");
    expect_fail("term2", "FAIL  reset/step    *terminated is 2 at episode");
    expect_fail("term2", ", expected 0 or 1");
    expect_fail("rand",
                "FAIL  determinism   seed 1 played twice with the same actions differs: episode 1, reset: "
                "obs[0] is");
    expect_fail("rand", "rand()");
    expect_fail("render",
                "FAIL  render        render wrote past render_height x render_width x 3 = 10 x 12 x 3 = "
                "360 bytes");
    expect_fail("crash", "FAIL  crash         SIGSEGV in the env's step (play 1, episode 1, step 4)");
    /* What failed is counted. */
    assert_int_equal(shell_in(g_dir, &out, "$F env check walk --plugin ./nan.so"), 1);
    assert_non_null(strstr(out, "fleet env check: walk: 1 of"));
    assert_non_null(strstr(out, "checks failed"));
    free(out);
}

static void test_usage_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "$F env check nosuchgame"), 2);
    assert_non_null(strstr(out, "nosuchgame"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check walk --plugin ./nothere.so"), 2);
    assert_non_null(strstr(out, "No such file"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check cartpole --plugin ./good.so"), 2);
    assert_non_null(strstr(out, "provides env 'walk'"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check"), 2);
    assert_non_null(strstr(out, "missing env name"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check cartpole --episodes 0"), 2);
    assert_non_null(strstr(out, "--episodes expects an integer"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check cartpole --frames 3"), 2);
    assert_non_null(strstr(out, "unknown option '--frames'"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env list --plugin ./nothere.so"), 2);
    assert_non_null(strstr(out, "No such file"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env bench --plugin"), 2);
    assert_non_null(strstr(out, "--plugin needs a path"));
    free(out);
}

/* list shows the plugin's env alone; bench benches it, beside a built-in named with it. */
static void test_list_and_bench_plugin(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "$F env list --plugin ./good.so"), 0);
    assert_non_null(strstr(out, "plugin ./good.so (1 environment"));
    assert_non_null(strstr(out, "walk "));
    assert_non_null(strstr(out, "actions 2 "));
    assert_null(strstr(out, "cartpole"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env bench --plugin ./good.so --steps 2000 --json"), 0);
    assert_non_null(strstr(out, "\"case\":\"walk/single\""));
    assert_non_null(strstr(out, "\"case\":\"walk/vec16\""));
    assert_null(strstr(out, "cartpole"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env bench cartpole walk --plugin=./good.so --steps 2000 --json"), 0);
    assert_non_null(strstr(out, "\"case\":\"cartpole/single\""));
    assert_non_null(strstr(out, "\"case\":\"walk/vec16\""));
    free(out);
}

/* A plugin built against a version-2 header (no close member) is checked like any. */
static void test_abi2_plugin(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "$F env check --plugin ./abi2.so"), 0);
    assert_non_null(strstr(out, "PASS  definition    abi_version 2;"));
    assert_non_null(strstr(out, "PASS  determinism"));
    assert_null(strstr(out, "FAIL"));
    free(out);
}

/* play on an env without render prints each observation's numbers; record still needs
 * render. */
static void test_play_without_render(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell_in(g_dir, &out, "printf '11q' | $F env play walk --plugin ./norender.so --seed 3"), 0);
    assert_non_null(strstr(out, "obs float32 (3): min "));
    assert_non_null(strstr(out, "step 2 "));
    /* After two steps right of a start in [0, 5): pos, t = 2, 0.5. */
    assert_non_null(strstr(out, " 2 0.5\n"));
    assert_non_null(strstr(out, "played 1 episode(s)"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env record walk --plugin ./norender.so --out x.gif"), 1);
    assert_non_null(strstr(out, "no render function"));
    free(out);
    assert_int_equal(shell_in(g_dir, &out, "$F env check walk --plugin ./norender.so"), 0);
    assert_non_null(strstr(out, "SKIP  render"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtins_pass),         cmocka_unit_test(test_docs_example),
        cmocka_unit_test(test_broken_plugins_fail),   cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_list_and_bench_plugin), cmocka_unit_test(test_play_without_render),
        cmocka_unit_test(test_abi2_plugin),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
