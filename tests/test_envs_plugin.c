/* Unit tests for envs/core/plugin and envs/factory: loading environments from shared objects.
 *
 * The shared objects are compiled here, at run time, with the build's C compiler
 * (FLEET_CC, else cc) against the installed-header layout: a temp folder holds
 * include/fleet/env.h (a copy of the tree's include/fleet/env.h) and the sources the tests write,
 * plus the real examples/gridgame/gridgame.c. Covered: a good plugin (the example), one
 * whose definition still has the older loose obs_dtype/obs_rank/obs_shape members,
 * every error path of the loader (missing file, not a shared object, missing symbol,
 * NULL definition, wrong ABI, bad spaces, name mismatch), bare file names, fl_env_resolve,
 * fl_env_create_wrapped, fl_env_instance_options, fl_vecenv_configure with the example's
 * options, that <fleet/env.h> compiles alone (only the C library's headers) and that its
 * inline generator, compiled into a plugin, draws the same numbers as common/rng.c; and
 * that the tree's headers and <fleet/env.h> can be included together (they are one
 * definition, not two copies). */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/rng.h"
#include "envs/classic/classic.h"
#include "envs/core/env.h"
#include "envs/core/plugin.h"
#include "envs/factory.h"
#include "envs/registry.h"
#include "envs/core/vecenv.h"

static char g_dir[256];
static char g_grid[512]; /* the compiled example */

static const char *source_dir(void) {
    const char *s = getenv("FLEET_SOURCE_DIR");
    return s ? s : ".";
}

static const char *compiler(void) {
    const char *c = getenv("FLEET_CC");
    return c && c[0] ? c : "cc";
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Compiles src into the shared object out (with extra flags); returns the exit status
 * and prints the compiler's output when it fails. */
static int compile_so(const char *src, const char *out, const char *flags) {
    char log[600], cmd[4096];
    snprintf(log, sizeof log, "%s/cc.log", g_dir);
    snprintf(cmd, sizeof cmd, "%s -std=c11 -Wall -Wextra -Werror -shared -fPIC -O1 -I%s/include %s %s -o %s >%s 2>&1",
             compiler(), g_dir, flags ? flags : "", src, out, log);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "compile failed (%d): %s\n", rc, cmd);
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
        if (f) fclose(f);
    }
    return rc;
}

/* Writes text as name.c in the temp folder and builds lib<name>.so; path into out. */
static void build_plugin(const char *name, const char *text, const char *flags, char *out, size_t len) {
    char src[512];
    snprintf(src, sizeof src, "%s/%s.c", g_dir, name);
    write_text(src, text);
    snprintf(out, len, "%s/lib%s.so", g_dir, name);
    assert_int_equal(compile_so(src, out, flags), 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/fleet-plugin-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/include/fleet && cp %s/include/fleet/env.h %s/include/fleet/env.h", g_dir,
             source_dir(), g_dir);
    if (system(cmd) != 0) return -1;
    char src[600];
    snprintf(src, sizeof src, "%s/examples/gridgame/gridgame.c", source_dir());
    snprintf(g_grid, sizeof g_grid, "%s/libgridgame.so", g_dir);
    return compile_so(src, g_grid, "-fvisibility=hidden") == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A plugin source: a valid 1-D env whose definition the fragment `tweak` edits. */
static void plugin_text(char *buf, size_t len, const char *tweak) {
    snprintf(buf, len,
             "#include <fleet/env.h>\n"
             "#include <string.h>\n"
             "static void reset(void *s, fl_rng_t *r, void *obs) { (void)s; (void)r; memset(obs, 0, 8); }\n"
             "static void step(void *s, fl_rng_t *r, int a, void *obs, float *rew, int *t) {\n"
             "    (void)s; (void)r; (void)a; memset(obs, 0, 8); *rew = 0; *t = 1; }\n"
             "static fl_env_def_t def = {.abi_version = FL_ENV_ABI_VERSION, .name = \"tiny\",\n"
             "    .obs = {FL_DTYPE_FLOAT32, 1, {2}}, .num_actions = 2,\n"
             "    .state_size = 8, .reset = reset, .step = step};\n"
             "FL_ENV_EXPORT const fl_env_def_t *fl_env_plugin(void) { %s return &def; }\n",
             tweak);
}

static fl_status load(const char *path, const char *name, const fl_env_def_t **def, fl_err_t *err) {
    fl_err_init(err);
    fl_status s = fl_env_load_plugin(path, name, def, err);
    if (s != FL_OK) fprintf(stderr, "  (message: %s)\n", err->msg);
    return s;
}

/* ---- The installed header stands alone ------------------------------------------------ */

static void test_installed_header_standalone(void **state) {
    (void)state;
    char text[8192];
    size_t n = 0;
#define EMIT(...) n += (size_t)snprintf(text + n, sizeof text - n, __VA_ARGS__)
    EMIT("#include <fleet/env.h>\n#include <stddef.h>\n#include <string.h>\n");
    EMIT("_Static_assert(FL_ENV_ABI_VERSION == %d, \"abi\");\n", FL_ENV_ABI_VERSION);
    /* The function types must be the same too: assigning them checks at compile time. */
    EMIT(
        "static void rs(void *s, fl_rng_t *r, void *o) { (void)s; (void)r; (void)o; }\n"
        "static void st(void *s, fl_rng_t *r, int a, void *o, float *w, int *t) {\n"
        "    (void)s; (void)r; (void)a; (void)o; (void)w; (void)t; }\n"
        "static void rd(const void *s, uint8_t *p) { (void)s; (void)p; }\n"
        "static int cf(void *s, const fl_env_options_t *o) { (void)s; (void)o; return 0; }\n"
        "static const char *an(int a) { (void)a; return \"\"; }\n"
        "fl_env_reset_fn f1 = rs; fl_env_step_fn f2 = st; fl_env_render_fn f3 = rd; fl_env_configure_fn f4 = cf;\n"
        "fl_env_action_name_fn f5 = an;\n"
        "int symbol_ok(void) { return strcmp(FL_ENV_PLUGIN_SYMBOL, \"%s\") == 0; }\n",
        FL_ENV_PLUGIN_SYMBOL);
    /* Draws for comparison with common/rng.c. */
    EMIT(
        "void draws(fl_rng_t *r, int n, uint64_t *u, double *d, float *f, uint64_t *b) {\n"
        "    for (int i = 0; i < n; i++) { u[i] = fl_env_rng_u64(r); d[i] = fl_env_rng_double(r);\n"
        "        f[i] = fl_env_rng_float(r); b[i] = fl_env_rng_below(r, (uint64_t)i * 7919 + 3); }\n"
        "}\n");
#undef EMIT
    assert_true(n < sizeof text);
    char so[512];
    build_plugin("layout", text, NULL, so, sizeof so);

    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    int (*symbol_ok)(void);
    void (*draws)(fl_rng_t *, int, uint64_t *, double *, float *, uint64_t *);
    void *p = dlsym(h, "symbol_ok");
    assert_non_null(p);
    memcpy(&symbol_ok, &p, sizeof p);
    p = dlsym(h, "draws");
    assert_non_null(p);
    memcpy(&draws, &p, sizeof p);
    assert_int_equal(symbol_ok(), 1);

    enum { N = 64 };
    uint64_t u[N], b[N];
    double d[N];
    float f[N];
    fl_rng_t theirs, ours;
    fl_rng_init_stream(&theirs, 42, 3);
    ours = theirs;
    draws(&theirs, N, u, d, f, b);
    for (int i = 0; i < N; i++) {
        assert_true(u[i] == fl_rng_u64(&ours));
        assert_true(d[i] == fl_rng_double(&ours));
        assert_true(f[i] == fl_rng_float(&ours));
        assert_true(b[i] == fl_rng_below(&ours, (uint64_t)i * 7919 + 3));
    }
    assert_memory_equal(&theirs, &ours, sizeof ours);
    dlclose(h);
}

/* The tree's headers and the installed one are one definition: they mix. */
static void test_installed_header_mixes_with_tree(void **state) {
    (void)state;
    char src[512], out[512];
    snprintf(src, sizeof src, "%s/mix.c", g_dir);
    write_text(src,
               "#include \"envs/core/env.h\"\n#include <fleet/env.h>\n#include \"common/rng.h\"\n"
               "int mix(void) { fl_rng_t r; fl_rng_init(&r, 1); return (int)(fl_env_rng_u64(&r) & 1); }\n");
    snprintf(out, sizeof out, "%s/libmix.so", g_dir);
    char flags[600];
    snprintf(flags, sizeof flags, "-I%s", source_dir());
    assert_int_equal(compile_so(src, out, flags), 0);
}

/* ---- Loading ------------------------------------------------------------------------- */

static void test_loads_example(void **state) {
    (void)state;
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(g_grid, "gridgame", &def, &err), FL_OK);
    assert_non_null(def);
    assert_string_equal(def->name, "gridgame");
    assert_int_equal(def->obs.dtype, FL_DTYPE_FLOAT32);
    assert_int_equal(def->obs.rank, 2);
    assert_int_equal(def->obs.shape[0], 5);
    assert_int_equal(def->obs.shape[1], 5);
    assert_int_equal(def->num_actions, 4);
    assert_int_equal(def->max_episode_steps, 50);
    assert_int_equal(fl_env_obs_size(def), 25 * sizeof(float));
    /* Again: the same definition (the plugin stays loaded). An empty name accepts it. */
    const fl_env_def_t *again = NULL;
    assert_int_equal(load(g_grid, "", &again, &err), FL_OK);
    assert_ptr_equal(again, def);
    assert_int_equal(load(g_grid, NULL, &again, &err), FL_OK);
    assert_ptr_equal(again, def);

    /* It runs: a vecenv of the plugin's env steps and ends episodes. */
    fl_vecenv_t *ve = NULL;
    assert_int_equal(fl_vecenv_create(def, 3, 7, 0, &ve, &err), FL_OK);
    float obs[3 * 25], rew[3];
    uint8_t term[3], trunc[3];
    int32_t act[3] = {1, 3, 0};
    fl_episode_stats_t done[3];
    fl_vecenv_reset(ve, obs);
    int ended = 0;
    for (int t = 0; t < 200; t++) {
        assert_int_equal(fl_vecenv_step(ve, act, obs, rew, term, trunc, NULL, done, &err), FL_OK);
        for (int i = 0; i < 3; i++) ended += term[i] || trunc[i];
        act[0] = t % 2 ? 1 : 3; /* down/right: reaches the goal */
    }
    assert_true(ended > 0);
    fl_vecenv_destroy(ve);
}

/* fl_env_def_t.obs took the place of three loose members (obs_dtype, obs_rank,
 * obs_shape) with the same layout, so a plugin whose definition has the old members
 * (as one built against an earlier header does) still loads under ABI 2. */
static void test_loads_old_loose_obs_layout(void **state) {
    (void)state;
    char so[512];
    build_plugin("oldlayout",
                 "#include <fleet/env.h>\n"
                 "#include <string.h>\n"
                 "typedef struct old_def {\n"
                 "    int abi_version; const char *name; const char *description;\n"
                 "    fl_dtype obs_dtype; int obs_rank; int obs_shape[FL_ENV_MAX_RANK];\n"
                 "    int num_actions; int max_episode_steps; size_t state_size;\n"
                 "    fl_env_reset_fn reset; fl_env_step_fn step; fl_env_render_fn render;\n"
                 "    int render_height; int render_width;\n"
                 "    fl_env_configure_fn configure; fl_env_action_name_fn action_name;\n"
                 "} old_def_t;\n"
                 "static void reset(void *s, fl_rng_t *r, void *obs) { (void)s; (void)r; memset(obs, 1, 24); }\n"
                 "static void step(void *s, fl_rng_t *r, int a, void *obs, float *rew, int *t) {\n"
                 "    (void)s; (void)r; memset(obs, 2, 24); *rew = (float)a; *t = a == 2; }\n"
                 "static const old_def_t def = {.abi_version = 2, .name = \"old\", .description = \"loose\",\n"
                 "    .obs_dtype = FL_DTYPE_FLOAT32, .obs_rank = 2, .obs_shape = {3, 2}, .num_actions = 3,\n"
                 "    .max_episode_steps = 9, .state_size = 8, .reset = reset, .step = step};\n"
                 "FL_ENV_EXPORT const old_def_t *fl_env_plugin(void) { return &def; }\n",
                 NULL, so, sizeof so);
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(so, "old", &def, &err), FL_OK);
    assert_string_equal(def->name, "old");
    assert_string_equal(def->description, "loose");
    assert_int_equal(def->obs.dtype, FL_DTYPE_FLOAT32);
    assert_int_equal(def->obs.rank, 2);
    assert_int_equal(def->obs.shape[0], 3);
    assert_int_equal(def->obs.shape[1], 2);
    assert_int_equal(def->num_actions, 3);
    assert_int_equal(def->max_episode_steps, 9);
    assert_int_equal(def->state_size, 8);
    assert_null(def->render);
    assert_null(def->configure);
    assert_null(def->action_name);
    assert_int_equal(fl_env_obs_size(def), 6 * sizeof(float));
    fl_vecenv_t *ve = NULL;
    assert_int_equal(fl_vecenv_create(def, 2, 3, 0, &ve, &err), FL_OK);
    float obs[2 * 6], rew[2];
    uint8_t term[2], trunc[2];
    int32_t act[2] = {1, 2};
    fl_vecenv_reset(ve, obs);
    assert_int_equal(fl_vecenv_step(ve, act, obs, rew, term, trunc, NULL, NULL, &err), FL_OK);
    assert_true(rew[0] == 1.0f && rew[1] == 2.0f);
    assert_int_equal(term[0], 0);
    assert_int_equal(term[1], 1);
    fl_vecenv_destroy(ve);
}

static void test_missing_file(void **state) {
    (void)state;
    const fl_env_def_t *def = (const fl_env_def_t *)&def;
    fl_err_t err;
    char path[512];
    snprintf(path, sizeof path, "%s/libnothere.so", g_dir);
    assert_int_equal(load(path, "x", &def, &err), FL_NOT_FOUND);
    assert_null(def);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "No such file"));
    /* Relative: the message says where it looked. */
    assert_int_equal(load("./no/such/libgame.so", "x", &def, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "./no/such/libgame.so"));
    assert_non_null(strstr(err.msg, "relative to the working directory"));
    /* A folder is not a plugin. */
    assert_int_equal(load(g_dir, "x", &def, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(load("", "x", &def, &err), FL_INVALID_ARGUMENT);
}

static void test_not_a_shared_object(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/notelf.so", g_dir);
    write_text(path, "this is not an ELF file, just text that is long enough to have a header\n");
    /* What dlopen itself says about the file must be in the message. */
    assert_null(dlopen(path, RTLD_NOW | RTLD_LOCAL));
    char expected[512];
    snprintf(expected, sizeof expected, "%s", dlerror());
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(path, "x", &def, &err), FL_FAILED_PRECONDITION);
    assert_null(def);
    assert_non_null(strstr(err.msg, "dlopen failed"));
    assert_non_null(strstr(err.msg, expected));
}

static void test_missing_symbol(void **state) {
    (void)state;
    char so[512];
    build_plugin("nosym", "int not_a_plugin(void) { return 1; }\n", NULL, so, sizeof so);
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(so, "x", &def, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, so));
    assert_non_null(strstr(err.msg, "no symbol fl_env_plugin"));
    /* Hidden by visibility is the same as missing. */
    char text[2048];
    plugin_text(text, sizeof text, "");
    char *exp = strstr(text, "FL_ENV_EXPORT ");
    assert_non_null(exp);
    memset(exp, ' ', strlen("FL_ENV_EXPORT"));
    build_plugin("hidden", text, "-fvisibility=hidden", so, sizeof so);
    assert_int_equal(load(so, "tiny", &def, &err), FL_NOT_FOUND);
    assert_null(def);
}

static void test_null_definition(void **state) {
    (void)state;
    char text[2048], so[512];
    plugin_text(text, sizeof text, "if (def.name) return NULL;");
    build_plugin("nulldef", text, NULL, so, sizeof so);
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(so, "tiny", &def, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "returned NULL"));
}

static void test_wrong_abi(void **state) {
    (void)state;
    char text[2048], so[512];
    plugin_text(text, sizeof text, "def.abi_version = 7;");
    build_plugin("abi7", text, NULL, so, sizeof so);
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(so, "tiny", &def, &err), FL_FAILED_PRECONDITION);
    assert_null(def);
    char want[128];
    snprintf(want, sizeof want, "abi_version is 7, this fleet expects %d..%d", FL_ENV_ABI_VERSION_MIN,
             FL_ENV_ABI_VERSION);
    assert_non_null(strstr(err.msg, want));
    assert_non_null(strstr(err.msg, so));
}

static void test_bad_spaces(void **state) {
    (void)state;
    static const struct {
        const char *tweak, *field;
    } cases[] = {
        {"def.obs.rank = 2; def.obs.shape[1] = 0;", "obs_shape[1]"},
        {"def.obs.rank = 5;", "obs_rank"},
        {"def.obs.dtype = (fl_dtype)9;", "obs_dtype"},
        {"def.num_actions = 0;", "num_actions"},
        {"def.max_episode_steps = -1;", "max_episode_steps"},
        {"def.step = 0;", "step function"},
        {"def.name = \"\";", "name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048], so[512], name[32];
        plugin_text(text, sizeof text, cases[i].tweak);
        snprintf(name, sizeof name, "bad%zu", i);
        build_plugin(name, text, NULL, so, sizeof so);
        const fl_env_def_t *def = NULL;
        fl_err_t err;
        assert_int_equal(load(so, NULL, &def, &err), FL_INVALID_ARGUMENT);
        assert_null(def);
        assert_non_null(strstr(err.msg, cases[i].field));
        assert_non_null(strstr(err.msg, so));
    }
}

static void test_name_mismatch(void **state) {
    (void)state;
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(g_grid, "mygame", &def, &err), FL_INVALID_ARGUMENT);
    assert_null(def);
    assert_non_null(strstr(err.msg, "provides env 'gridgame'"));
    assert_non_null(strstr(err.msg, "env.name is 'mygame'"));
}

/* A bare file name means the file in the working directory. */
static void test_bare_name_is_cwd(void **state) {
    (void)state;
    char old[PATH_MAX];
    assert_non_null(getcwd(old, sizeof old));
    assert_int_equal(chdir(g_dir), 0);
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    fl_status s1 = load("libgridgame.so", "gridgame", &def, &err);
    const fl_env_def_t *def2 = NULL;
    fl_status s2 = load("./libgridgame.so", "gridgame", &def2, &err);
    assert_int_equal(chdir(old), 0);
    assert_int_equal(s1, FL_OK);
    assert_int_equal(s2, FL_OK);
    assert_ptr_equal(def, def2);
    assert_string_equal(def->name, "gridgame");
}

static void test_resolve(void **state) {
    (void)state;
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_env_resolve("", "cartpole", &def, &err), FL_OK);
    assert_ptr_equal(def, &fl_env_cartpole);
    assert_int_equal(fl_env_resolve(NULL, "cartpole", &def, &err), FL_OK);
    assert_ptr_equal(def, &fl_env_cartpole);
    assert_int_equal(fl_env_resolve("", "gridgame", &def, &err), FL_NOT_FOUND); /* not built in */
    assert_int_equal(fl_env_resolve(g_grid, "gridgame", &def, &err), FL_OK);
    assert_string_equal(def->name, "gridgame");
    /* With a plugin, the name must be the plugin's: a built-in name is a mismatch. */
    assert_int_equal(fl_env_resolve(g_grid, "cartpole", &def, &err), FL_INVALID_ARGUMENT);
}

/* ---- Options --------------------------------------------------------------------------- */

static void test_instance_options(void **state) {
    (void)state;
    fl_env_factory_opts_t f;
    fl_env_factory_opts_init(&f);
    f.sticky_actions = 0.25;
    f.difficulty_ramping = 0;
    f.rng = FL_ENV_RNG_REFERENCE;
    f.args = "slip=0.5";
    fl_env_options_t o;
    fl_env_instance_options(&f, &o);
    assert_true(o.sticky_prob == 0.25f);
    assert_int_equal(o.difficulty_ramping, 0);
    assert_int_equal(o.reference_rng, 1);
    assert_string_equal(o.args, "slip=0.5");
    fl_env_factory_opts_init(&f);
    fl_env_instance_options(&f, &o);
    assert_true(o.sticky_prob == 0.1f);
    assert_int_equal(o.difficulty_ramping, 1);
    assert_int_equal(o.reference_rng, 0);
    assert_string_equal(o.args, "");
    f.args = NULL;
    fl_env_instance_options(&f, &o);
    assert_string_equal(o.args, "");
}

/* fl_env_create_wrapped: the env of the options, its errors naming the key. */
static void test_create_wrapped(void **state) {
    (void)state;
    fl_env_factory_opts_t f;
    fl_env_factory_opts_init(&f);
    f.wrappers = "framestack(2)";
    fl_wrapped_env_t *w = NULL;
    fl_err_t err;
    fl_err_init(&err);
    assert_int_equal(fl_env_create_wrapped(&f, &w, &err), FL_OK);
    assert_non_null(w);
    assert_string_equal(fl_wrapped_env_info(w)->name, "cartpole[framestack(2)]");
    assert_int_equal(fl_wrapped_env_info(w)->obs.shape[0], 8);
    fl_wrapped_env_destroy(w);
    f.wrappers = "nosuchwrapper";
    assert_int_not_equal(fl_env_create_wrapped(&f, &w, &err), FL_OK);
    assert_null(w);
    const char *want = "env.wrappers = \"nosuchwrapper\": ";
    assert_true(strncmp(err.msg, want, strlen(want)) == 0);
    fl_env_factory_opts_init(&f);
    f.name = "no-such-env";
    assert_int_equal(fl_env_create_wrapped(&f, &w, &err), FL_NOT_FOUND);
    assert_null(w);
    assert_true(strncmp(err.msg, "env.name: ", strlen("env.name: ")) == 0);
    f.plugin = "no-such-plugin.so";
    assert_int_equal(fl_env_create_wrapped(&f, &w, &err), FL_NOT_FOUND);
    assert_non_null(strstr(err.msg, "env.plugin 'no-such-plugin.so'"));
}

static void test_vecenv_configure(void **state) {
    (void)state;
    const fl_env_def_t *def = NULL;
    fl_err_t err;
    assert_int_equal(load(g_grid, "gridgame", &def, &err), FL_OK);
    fl_env_options_t o = {.sticky_prob = 0.0f, .difficulty_ramping = 1, .reference_rng = 0, .args = "slip=2"};
    fl_vecenv_t *ve = NULL;
    assert_int_equal(fl_vecenv_create(def, 2, 1, 0, &ve, &err), FL_OK);
    fl_err_init(&err);
    assert_int_equal(fl_vecenv_configure(ve, &o, &err), FL_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "gridgame"));
    assert_non_null(strstr(err.msg, "args = \"slip=2\""));
    fl_vecenv_destroy(ve);

    /* slip=1: every move goes in a random direction, so from the same seed the agent
     * walks differently than with slip=0 under the same fixed actions. */
    float obs0[25], obs1[25], r;
    uint8_t te, tr;
    int32_t a = 3;
    fl_vecenv_t *v0 = NULL, *v1 = NULL;
    assert_int_equal(fl_vecenv_create(def, 1, 5, 0, &v0, &err), FL_OK);
    assert_int_equal(fl_vecenv_create(def, 1, 5, 0, &v1, &err), FL_OK);
    o.args = "";
    assert_int_equal(fl_vecenv_configure(v0, &o, &err), FL_OK);
    o.args = "slip=1";
    assert_int_equal(fl_vecenv_configure(v1, &o, &err), FL_OK);
    fl_vecenv_reset(v0, obs0);
    fl_vecenv_reset(v1, obs1);
    assert_memory_equal(obs0, obs1, sizeof obs0);
    int differ = 0;
    for (int t = 0; t < 20; t++) {
        a = t % 2 ? 1 : 3;
        assert_int_equal(fl_vecenv_step(v0, &a, obs0, &r, &te, &tr, NULL, NULL, &err), FL_OK);
        assert_int_equal(fl_vecenv_step(v1, &a, obs1, &r, &te, &tr, NULL, NULL, &err), FL_OK);
        differ += memcmp(obs0, obs1, sizeof obs0) != 0;
    }
    assert_true(differ > 0);
    /* After the first reset it is too late. */
    fl_err_init(&err);
    assert_int_equal(fl_vecenv_configure(v0, &o, &err), FL_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "before the first fl_vecenv_reset"));
    fl_vecenv_destroy(v0);
    fl_vecenv_destroy(v1);

    /* An env without configure takes any options. */
    assert_int_equal(fl_vecenv_create(&fl_env_cartpole, 2, 1, 0, &ve, &err), FL_OK);
    o.args = "anything";
    assert_int_equal(fl_vecenv_configure(ve, &o, &err), FL_OK);
    fl_vecenv_destroy(ve);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_installed_header_standalone),
        cmocka_unit_test(test_installed_header_mixes_with_tree),
        cmocka_unit_test(test_loads_example),
        cmocka_unit_test(test_loads_old_loose_obs_layout),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_not_a_shared_object),
        cmocka_unit_test(test_missing_symbol),
        cmocka_unit_test(test_null_definition),
        cmocka_unit_test(test_wrong_abi),
        cmocka_unit_test(test_bad_spaces),
        cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_bare_name_is_cwd),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_instance_options),
        cmocka_unit_test(test_create_wrapped),
        cmocka_unit_test(test_vecenv_configure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
