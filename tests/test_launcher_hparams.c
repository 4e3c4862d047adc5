/* Tests of launcher/hparams: a run's configuration for TensorBoard.
 *   - the text summary is a Markdown table of every key, in the key table's order, its
 *     value as a code span and the default where the value differs; a value with
 *     backticks gets a longer delimiter;
 *   - the hyperparameters: every key but the ones of files, processes and the network
 *     (each of those a real key), with the kind their type gives, enum domains,
 *     `differs` where the value is not the default; a string that is not UTF-8 is left
 *     out;
 *   - fl_hparams_write writes the text and the two hparams records, whole records that
 *     protobuf-c reads back as TensorBoard's messages (the real tensorboard package reads
 *     a real run's: tests/integration_tensorboard_python.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "launcher/hparams.h"
#include "tensorboard.pb-c.h"
#include "tests/proc_util.h"

static void set(fl_config_t *c, const char *assignment) {
    fl_err_t err;
    fl_err_init(&err);
    if (fl_config_set(c, assignment, &err) != FL_OK) fail_msg("%s: %s", assignment, err.msg);
}

static void test_markdown_table(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "learner.lr=0.001");
    set(&c, "run.name=a|b`c");
    char *md = fl_hparams_config_markdown(&c);
    assert_non_null(md);
    assert_non_null(strstr(md, "| key | value | default |\n|---|---|---|\n| run.name | "));
    assert_non_null(strstr(md, "\n| learner.lr | `0.001` | `0.003` |\n"));
    assert_non_null(strstr(md, "\n| learner.batch_size | `128` |  |\n"));
    assert_non_null(strstr(md, "\n| run.checkpoint_dir | `\"\"` |  |\n")); /* the empty string */
    assert_non_null(strstr(md, "\n| run.name | `` a|b`c `` | `default` |\n"));
    /* one row per key, in the table's order */
    size_t n = fl_config_key_count();
    const char *at = md;
    for (size_t i = 0; i < n; i++) {
        char row[128];
        snprintf(row, sizeof row, "\n| %s | ", fl_config_key_name(i));
        const char *p = strstr(at, row);
        if (!p) fail_msg("no row of %s after the one before", fl_config_key_name(i));
        at = p + 1;
    }
    int rows = 0;
    for (const char *p = md; (p = strstr(p, "\n| ")); p++) rows++;
    assert_int_equal(rows, (int)n + 1); /* and the header */
    free(md);
}

static const fl_tfevents_hparam_t *find(const fl_hparams_t *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->hp[i].name, name) == 0) return &h->hp[i];
    return NULL;
}

static void test_hyperparameters(void **unused) {
    (void)unused;
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "learner.lr=0.001");
    set(&c, "learner.mode=gorila");
    set(&c, "env.args=\xff\xfe");
    fl_hparams_t *h = fl_hparams_from_config(&c);
    assert_non_null(h);
    const fl_tfevents_hparam_t *lr = find(h, "learner.lr"), *mode = find(h, "learner.mode"),
                               *tf32 = find(h, "learner.tf32"), *env = find(h, "env.name"),
                               *bs = find(h, "learner.batch_size");
    assert_true(lr && mode && tf32 && env && bs && find(h, "run.seed") && find(h, "actor.count"));
    assert_int_equal(lr->kind, FL_TFEVENTS_HP_NUMBER);
    assert_true(lr->number == 0.001 && lr->differs && lr->description && lr->description[0]);
    assert_int_equal(bs->kind, FL_TFEVENTS_HP_NUMBER);
    assert_true(bs->number == 128 && !bs->differs);
    assert_int_equal(mode->kind, FL_TFEVENTS_HP_STRING);
    assert_string_equal(mode->string, "gorila");
    assert_true(mode->differs);
    assert_int_equal(mode->n_choices, 2);
    assert_string_equal(mode->choices[0], "apex");
    assert_string_equal(mode->choices[1], "gorila");
    assert_int_equal(tf32->kind, FL_TFEVENTS_HP_BOOL);
    assert_int_equal(env->kind, FL_TFEVENTS_HP_STRING);
    assert_int_equal(env->n_choices, 0);
    assert_string_equal(env->string, "cartpole");
    assert_null(find(h, "env.args")); /* not UTF-8 */
    /* where files go, processes and the network are not hyperparameters */
    static const char *const plumbing[] = {
        "run.name",   "run.out_dir", "run.tls_dir", "run.log_level", "learner.checkpoint_dir",
        "replay.wal", "actor.nice"};
    for (size_t i = 0; i < sizeof plumbing / sizeof plumbing[0]; i++) {
        assert_null(find(h, plumbing[i]));
        assert_false(fl_hparams_is_hparam(plumbing[i]));
    }
    /* every key is one or the other, and every excluded name is a key: the hparams are
     * the keys fl_hparams_is_hparam accepts, no name twice */
    int hparams = 0;
    for (size_t i = 0; i < fl_config_key_count(); i++) hparams += fl_hparams_is_hparam(fl_config_key_name(i));
    assert_int_equal(h->n + 1, hparams); /* env.args left out */
    assert_false(fl_hparams_is_hparam("learner.nothing"));
    fl_hparams_free(h);
    fl_hparams_free(NULL);
}

/* The records of an event file, unpacked (the first, file_version, skipped). */
static int read_events(const char *path, Tensorboard__Event **ev, int max) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    int n = 0;
    unsigned char head[12];
    while (n < max && fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | head[i];
        unsigned char *buf = malloc(len + 4);
        assert_int_equal(fread(buf, 1, len + 4, f), len + 4);
        ev[n] = tensorboard__event__unpack(NULL, len, buf);
        assert_non_null(ev[n]);
        free(buf);
        n++;
    }
    fclose(f);
    return n;
}

static void test_write(void **unused) {
    (void)unused;
    char dir[] = "/tmp/fleet-hparams-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_config_t c;
    fl_config_defaults(&c);
    set(&c, "learner.batch_size=64");
    fl_err_t err;
    fl_err_init(&err);
    fl_tfevents_t *w = NULL;
    assert_int_equal(fl_tfevents_open(dir, &w, &err), FL_OK);
    if (fl_hparams_write(w, &c, 0, 1700000000.5, 1, &err) != FL_OK) fail_msg("%s", err.msg);
    if (fl_hparams_write(w, &c, 1234, 1700000100.5, 0, &err) != FL_OK) fail_msg("%s", err.msg); /* text only */
    if (fl_tfevents_session_end(w, 1700000200.5, 1, &err) != FL_OK) fail_msg("%s", err.msg);
    char path[512];
    snprintf(path, sizeof path, "%s", fl_tfevents_path(w));
    fl_tfevents_close(w);
    Tensorboard__Event *ev[8];
    int n = read_events(path, ev, 8);
    assert_int_equal(n, 6); /* file_version, text, experiment, session start, text, session end */
    const char *tags[] = {"",
                          FL_HPARAMS_TEXT_TAG,
                          "_hparams_/experiment",
                          "_hparams_/session_start_info",
                          FL_HPARAMS_TEXT_TAG,
                          "_hparams_/session_end_info"};
    for (int i = 1; i < n; i++) {
        assert_int_equal(ev[i]->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
        assert_int_equal(ev[i]->summary->n_value, 1);
        const Tensorboard__Summary__Value *v = ev[i]->summary->value[0];
        assert_string_equal(v->tag, tags[i]);
        assert_int_equal(v->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_TENSOR);
        assert_non_null(v->metadata);
        const char *plugin = v->metadata->plugin_data->plugin_name;
        if (strcmp(v->tag, FL_HPARAMS_TEXT_TAG) == 0) {
            assert_string_equal(plugin, "text");
            assert_int_equal(v->tensor->dtype, TENSORBOARD__DATA_TYPE__DT_STRING);
            assert_int_equal(v->tensor->tensor_shape->n_dim, 0);
            assert_int_equal(v->tensor->n_string_val, 1);
            assert_non_null(memmem(v->tensor->string_val[0].data, v->tensor->string_val[0].len,
                                   "| learner.batch_size | `64` | `128` |", 36));
            assert_int_equal(ev[i]->step, i == 1 ? 0 : 1234);
            continue;
        }
        assert_string_equal(plugin, "hparams");
        assert_int_equal(ev[i]->step, 0);
        assert_int_equal(v->tensor->dtype, TENSORBOARD__DATA_TYPE__DT_FLOAT);
        assert_int_equal(v->tensor->tensor_shape->n_dim, 1);
        assert_int_equal(v->tensor->tensor_shape->dim[0]->size, 0);
        const ProtobufCBinaryData *content = &v->metadata->plugin_data->content;
        Tensorboard__HParamsPluginData *d = tensorboard__hparams_plugin_data__unpack(NULL, content->len, content->data);
        assert_non_null(d);
        assert_int_equal(d->version, 0);
        if (i == 2) {
            assert_int_equal(d->data_case, TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT);
            assert_true(d->experiment->n_hparam_infos > 50);
            assert_int_equal(d->experiment->n_metric_infos, 4);
            assert_string_equal(d->experiment->metric_infos[0]->name->tag, "eval/return_mean");
            int differs = 0;
            for (size_t k = 0; k < d->experiment->n_hparam_infos; k++)
                differs += d->experiment->hparam_infos[k]->differs;
            assert_int_equal(differs, 1); /* learner.batch_size */
        } else if (i == 3) {
            assert_int_equal(d->data_case, TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO);
            assert_true(d->session_start_info->start_time_secs == 1700000000.5);
            int found = 0;
            for (size_t k = 0; k < d->session_start_info->n_hparams; k++) {
                const Tensorboard__SessionStartInfo__HparamsEntry *e = d->session_start_info->hparams[k];
                if (strcmp(e->key, "learner.batch_size") == 0) {
                    assert_int_equal(e->value->kind_case, TENSORBOARD__VALUE__KIND_NUMBER_VALUE);
                    assert_true(e->value->number_value == 64);
                    found = 1;
                }
            }
            assert_true(found);
        } else {
            assert_int_equal(d->data_case, TENSORBOARD__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO);
            assert_int_equal(d->session_end_info->status, TENSORBOARD__STATUS__STATUS_SUCCESS);
            assert_true(d->session_end_info->end_time_secs == 1700000200.5);
        }
        tensorboard__hparams_plugin_data__free_unpacked(d, NULL);
    }
    for (int i = 0; i < n; i++) tensorboard__event__free_unpacked(ev[i], NULL);
    rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_markdown_table),
        cmocka_unit_test(test_hyperparameters),
        cmocka_unit_test(test_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
