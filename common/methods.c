/* methods: see methods.h. */
#include "common/methods.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fleet.pb-c.h"

#define PATH_MAX_LEN 96

static const struct {
    const ProtobufCServiceDescriptor *service;
    const char *method;
} rows[FL_METHOD_COUNT] = {
    [FL_METHOD_REPLAY_INSERT] = {&fleet__replay__descriptor, "Insert"},
    [FL_METHOD_REPLAY_SAMPLE] = {&fleet__replay__descriptor, "Sample"},
    [FL_METHOD_REPLAY_UPDATE_PRIORITIES] = {&fleet__replay__descriptor, "UpdatePriorities"},
    [FL_METHOD_REPLAY_INFO] = {&fleet__replay__descriptor, "Info"},
    [FL_METHOD_REPLAY_CHECKPOINT] = {&fleet__replay__descriptor, "Checkpoint"},
    [FL_METHOD_REPLAY_ROUND] = {&fleet__replay__descriptor, "Round"},
    [FL_METHOD_PARAM_PUBLISH] = {&fleet__param_server__descriptor, "Publish"},
    [FL_METHOD_PARAM_FETCH] = {&fleet__param_server__descriptor, "Fetch"},
    [FL_METHOD_PARAM_PUSH_GRADIENTS] = {&fleet__param_server__descriptor, "PushGradients"},
    [FL_METHOD_PARAM_INFO] = {&fleet__param_server__descriptor, "Info"},
    [FL_METHOD_CONTROL_REPORT] = {&fleet__control__descriptor, "Report"},
    [FL_METHOD_CONTROL_JOIN] = {&fleet__control__descriptor, "Join"},
};

static char paths[FL_METHOD_COUNT][PATH_MAX_LEN];
static const char *names[FL_METHOD_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Each row's method must be one of its service's (the descriptor's spelling is used). */
static void build(void) {
    for (int m = 0; m < FL_METHOD_COUNT; m++) {
        const ProtobufCServiceDescriptor *d = rows[m].service;
        const ProtobufCMethodDescriptor *md = protobuf_c_service_descriptor_get_method_by_name(d, rows[m].method);
        if (!md) continue; /* left "": tests/test_common_methods.c names the row */
        names[m] = md->name;
        snprintf(paths[m], sizeof paths[m], "/%s/%s", d->name, md->name);
    }
}

const char *fl_method_path(fl_method m) {
    if ((unsigned)m >= FL_METHOD_COUNT) return "";
    pthread_once(&once, build);
    return paths[m];
}

const char *fl_method_name(fl_method m) {
    if ((unsigned)m >= FL_METHOD_COUNT) return "";
    pthread_once(&once, build);
    return names[m] ? names[m] : "";
}

fl_method fl_method_find(const char *service, const char *s) {
    pthread_once(&once, build);
    for (int m = 0; m < FL_METHOD_COUNT; m++) {
        if (strcmp(rows[m].service->name, service) != 0) continue;
        if (strcmp(paths[m], s) == 0 || (names[m] && strcmp(names[m], s) == 0)) return (fl_method)m;
    }
    return FL_METHOD_COUNT;
}
