/* methods: the one table of fleet's RPC method paths ("/fleet.Replay/Insert"), built from
 * the service descriptors that protoc-c generates from proto/fleet.proto, so that no client
 * or server spells a path by hand.
 *
 * Adding an RPC: declare it in fleet.proto, add its enumerator here and its row in
 * methods.c (service descriptor and method name); tests/test_common_methods.c fails while
 * a method of a service has no row. The table is built once, on first use (thread-safe);
 * the strings live for the life of the process. */
#ifndef FL_COMMON_METHODS_H
#define FL_COMMON_METHODS_H

typedef enum {
    FL_METHOD_REPLAY_INSERT,
    FL_METHOD_REPLAY_SAMPLE,
    FL_METHOD_REPLAY_UPDATE_PRIORITIES,
    FL_METHOD_REPLAY_INFO,
    FL_METHOD_REPLAY_CHECKPOINT,
    FL_METHOD_REPLAY_ROUND,
    FL_METHOD_PARAM_PUBLISH,
    FL_METHOD_PARAM_FETCH,
    FL_METHOD_PARAM_PUSH_GRADIENTS,
    FL_METHOD_PARAM_INFO,
    FL_METHOD_CONTROL_REPORT,
    FL_METHOD_CONTROL_JOIN,
    FL_METHOD_COUNT
} fl_method;

/* The gRPC path of method m, e.g. "/fleet.ParamServer/Fetch"; "" for a value out of range. */
const char *fl_method_path(fl_method m);
/* The method's name within its service ("Fetch"). */
const char *fl_method_name(fl_method m);
/* The method whose path or bare name within `service` ("fleet.ParamServer") is `s`;
 * FL_METHOD_COUNT when there is none. */
fl_method fl_method_find(const char *service, const char *s);

#endif
