/* status: name and message tables, gRPC code mapping, error records. */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *fl_status_name(fl_status s) {
    switch (s) {
#define FL__STATUS_NAME(name, value, msg) \
    case name: return #name;
        FL_STATUS_TABLE(FL__STATUS_NAME)
#undef FL__STATUS_NAME
    }
    return "FL_<unknown status>";
}

const char *fl_status_str(fl_status s) {
    switch (s) {
#define FL__STATUS_MSG(name, value, msg) \
    case name: return msg;
        FL_STATUS_TABLE(FL__STATUS_MSG)
#undef FL__STATUS_MSG
    }
    return "unknown status";
}

int fl_status_to_grpc(fl_status s) {
    if ((int)s >= 0 && (int)s <= 16) return (int)s;
    switch (s) {
    case FL_NO_MEMORY: return 8;   /* RESOURCE_EXHAUSTED */
    case FL_IO_ERROR: return 13;   /* INTERNAL */
    case FL_PARSE_ERROR: return 3; /* INVALID_ARGUMENT */
    case FL_NO_DEVICE: return 9;   /* FAILED_PRECONDITION */
    default: return 2;             /* UNKNOWN */
    }
}

fl_status fl_status_from_grpc(int code) {
    if (code >= 0 && code <= 16) return (fl_status)code;
    return FL_UNKNOWN;
}

void fl_err_init(fl_err_t *e) {
    if (!e) return;
    e->code = FL_OK;
    e->msg[0] = '\0';
}

fl_status fl_err_set(fl_err_t *e, fl_status code, const char *fmt, ...) {
    if (!e) return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

fl_status fl_err_prefix(fl_err_t *e, const char *fmt, ...) {
    if (!e) return FL_OK;
    char prefix[FL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix);
    if (plen + 2 >= sizeof e->msg) plen = sizeof e->msg - 3;
    size_t olen = strnlen(e->msg, sizeof e->msg - 1);
    if (plen + 2 + olen >= sizeof e->msg) olen = sizeof e->msg - plen - 3;
    memmove(e->msg + plen + 2, e->msg, olen);
    memcpy(e->msg, prefix, plen);
    e->msg[plen] = ':';
    e->msg[plen + 1] = ' ';
    e->msg[plen + 2 + olen] = '\0';
    return e->code;
}
