/* rpc_internal: what the rpc layer's three files share (common/rpc.h is the interface):
 * rpc_tls.c (gRPC's start, transport settings, byte buffers; TLS, tokens and the access
 * token), rpc_server.c (the server) and rpc_client.c (channels, unary calls, streams).
 * Not for use outside common/rpc_*.c. */
#ifndef FL_RPC_INTERNAL_H
#define FL_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stddef.h>

#include "common/rpc.h"

/* Transport args written by fl__rpc_transport_args. */
#define FL__TRANSPORT_ARGS 6

/* The auth-context property the token check adds: which credential the call carried. */
#define CRED_PROPERTY "fleet.credential"
#define CRED_RUN "run"
#define CRED_LEARNER "learner"

/* What a channel keeps of the security it was made with, for its error messages. */
typedef struct channel_sec {
    int secure;
    char ca_file[256], cert_file[256];
    char access[128]; /* plaintext: "Bearer <access token>" sent on every call, or "" */
} channel_sec;

/* Under fl__rpc_sec_mu: the access token of plaintext servers and channels (rpc.h). */
extern pthread_mutex_t fl__rpc_sec_mu;
extern char *fl__rpc_access;

void fl__rpc_grpc_init(void);
int fl__rpc_effective_limit(int max_message_bytes);
gpr_timespec fl__rpc_deadline_from_ms(int64_t timeout_ms);
grpc_slice fl__rpc_read_all(grpc_byte_buffer *bb);
grpc_byte_buffer *fl__rpc_pack_pb(const ProtobufCMessage *msg);
grpc_byte_buffer *fl__rpc_copy_bytes(const void *data, size_t len);
size_t fl__rpc_transport_args(grpc_arg *a);
int fl__rpc_token_equal(const char *given, size_t given_len, const char *secret);
const grpc_metadata *fl__rpc_bearer_of(const grpc_metadata *md, size_t n, const char **v, size_t *vn);
const char *fl__rpc_sec_files(void);
grpc_server_credentials *fl__rpc_server_creds(int *secure);
void fl__rpc_access_metadata(const channel_sec *cs, grpc_op *op, grpc_metadata *md);
grpc_channel_credentials *fl__rpc_channel_creds(channel_sec *cs);

#endif
