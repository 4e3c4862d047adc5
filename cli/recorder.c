/* recorder: GIF, MP4 (ffmpeg on a pipe) and PNG-strip sinks behind one interface (see
 * recorder.h). The ffmpeg child is started by fork + execv of the path found on PATH;
 * between the two it calls only async-signal-safe functions (OpenBLAS may have threads). */
#include "cli/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/image.h"
#include "launcher/proc.h"

#define FFMPEG_HINT "MP4 needs ffmpeg on PATH (Debian: apt-get install ffmpeg), or record a .gif instead"

struct fl_recorder {
    fl_record_kind kind;
    fl_record_opts_t o;
    int w, h;        /* scaled frame */
    uint8_t *scaled; /* one scaled frame */
    int frames;      /* added so far */
    fl_gif_t *gif;   /* GIF */
    pid_t ffmpeg;    /* MP4: the child, its stdin and its output before the rename */
    int fd;
    char tmp[PATH_MAX];
    struct sigaction old_pipe;
    int64_t pick[FL_RECORD_MAX_STRIP]; /* PNG: the steps kept, increasing */
    uint8_t *kept[FL_RECORD_MAX_STRIP];
    int npick;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int fl_record_kind_of(const char *path) {
    if (!path) return -1;
    if (ends_with(path, ".gif")) return FL_RECORD_GIF;
    if (ends_with(path, ".png")) return FL_RECORD_PNG;
    if (ends_with(path, ".mp4")) return FL_RECORD_MP4;
    return -1;
}

fl_status fl_record_check(const char *path, fl_err_t *err) {
    int kind = fl_record_kind_of(path);
    if (kind < 0)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "'%s' must end in .gif (animation), .mp4 (video, with ffmpeg) or "
                          ".png (strip of frames)",
                          path ? path : "");
    char ffmpeg[PATH_MAX];
    if (kind == FL_RECORD_MP4 && fl_proc_find_on_path("ffmpeg", ffmpeg, sizeof ffmpeg) != 0)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "cannot record %s: " FFMPEG_HINT, path);
    return FL_OK;
}

/* Copies rgb (w, h) scaled up by an integer factor k into out. */
static void upscale(const uint8_t *rgb, int w, int h, int k, uint8_t *out) {
    for (int y = 0; y < h * k; y++)
        for (int x = 0; x < w * k; x++)
            memcpy(out + ((size_t)y * (size_t)(w * k) + (size_t)x) * 3,
                   rgb + ((size_t)(y / k) * (size_t)w + (size_t)(x / k)) * 3, 3);
}

/* rgb at the recorder's scale: rgb itself, or r->scaled (or dst when given). */
static const uint8_t *scaled(fl_recorder_t *r, const uint8_t *rgb, uint8_t *dst) {
    if (r->o.scale <= 1 && !dst) return rgb;
    uint8_t *out = dst ? dst : r->scaled;
    if (r->o.scale <= 1)
        memcpy(out, rgb, (size_t)r->w * (size_t)r->h * 3);
    else
        upscale(rgb, r->o.width, r->o.height, r->o.scale, out);
    return out;
}

/* ---- MP4: ffmpeg reading raw frames on its stdin --------------------------------- */

static fl_status mp4_open(fl_recorder_t *r, fl_err_t *err) {
    char ffmpeg[PATH_MAX], size[32], rate[32];
    if (fl_proc_find_on_path("ffmpeg", ffmpeg, sizeof ffmpeg) != 0)
        return fl_err_set(err, FL_FAILED_PRECONDITION, "cannot record %s: " FFMPEG_HINT, r->o.path);
    snprintf(size, sizeof size, "%dx%d", r->w, r->h);
    snprintf(rate, sizeof rate, "%g", 100.0 / (r->o.delay_cs > 0 ? r->o.delay_cs : 1));
    snprintf(r->tmp, sizeof r->tmp, "%s.tmp%ld", r->o.path, (long)getpid());
    char *argv[] = {ffmpeg,     "-y",    "-loglevel", "error",   "-f",  "rawvideo",
                    "-pix_fmt", "rgb24", "-s",        size,      "-r",  rate,
                    "-i",       "-",     "-pix_fmt",  "yuv420p", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
                    "-f",       "mp4",   r->tmp,      NULL};
    int p[2];
    if (pipe(p) != 0) return fl_err_set(err, FL_INTERNAL, "cannot record %s: pipe: %s", r->o.path, strerror(errno));
    fcntl(p[1], F_SETFD, FD_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[0], STDIN_FILENO);
        close(p[0]);
        execv(ffmpeg, argv);
        _exit(127);
    }
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        return fl_err_set(err, FL_INTERNAL, "cannot record %s: fork: %s", r->o.path, strerror(errno));
    }
    r->ffmpeg = pid;
    r->fd = p[1];
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &r->old_pipe);
    return FL_OK;
}

static fl_status mp4_write(fl_recorder_t *r, const uint8_t *frame, fl_err_t *err) {
    size_t n = (size_t)r->w * (size_t)r->h * 3, done = 0;
    while (done < n) {
        ssize_t k = write(r->fd, frame + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return fl_err_set(err, FL_IO_ERROR,
                              "recording %s: ffmpeg stopped reading frames (%s); its messages are "
                              "above",
                              r->o.path, k < 0 ? strerror(errno) : "no progress");
        done += (size_t)k;
    }
    return FL_OK;
}

/* Ends ffmpeg's input, waits for it, and renames its output into place when it
 * succeeded and ok is set; removes the output otherwise. */
static fl_status mp4_close(fl_recorder_t *r, int ok, fl_err_t *err) {
    close(r->fd);
    int status = 0;
    while (waitpid(r->ffmpeg, &status, 0) < 0 && errno == EINTR) {
    }
    sigaction(SIGPIPE, &r->old_pipe, NULL);
    fl_status s = FL_OK;
    if (ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        char how[96];
        fl_proc_describe_status(status, how, sizeof how);
        s = fl_err_set(err, FL_IO_ERROR, "recording %s: ffmpeg %s (its messages are above)", r->o.path, how);
    }
    if (ok && s == FL_OK && rename(r->tmp, r->o.path) != 0)
        s = fl_err_set(err, FL_IO_ERROR, "recording %s: rename from %s: %s", r->o.path, r->tmp, strerror(errno));
    if (!ok || s != FL_OK) unlink(r->tmp);
    return s;
}

/* ---- the sinks behind one interface ------------------------------------------------ */

/* Opens the sink; for a strip, length is the episode's (frames 0..length). */
static fl_status rec_open(const fl_record_opts_t *o, int kind, int64_t length, fl_recorder_t **out, fl_err_t *err) {
    fl_recorder_t *r = calloc(1, sizeof *r);
    if (!r) return fl_err_set(err, FL_NO_MEMORY, "recording %s: out of memory", o->path);
    r->kind = (fl_record_kind)kind;
    r->o = *o;
    r->w = o->width * o->scale;
    r->h = o->height * o->scale;
    r->fd = -1;
    *out = r;
    const size_t bytes = (size_t)r->w * (size_t)r->h * 3;
    if (kind == FL_RECORD_PNG) {
        r->npick = (int64_t)o->frames < length + 1 ? o->frames : (int)(length + 1);
        for (int i = 0; i < r->npick; i++) {
            r->pick[i] = r->npick == 1 ? 0 : (int64_t)((double)i * (double)length / (r->npick - 1) + 0.5);
            if (!(r->kept[i] = malloc(bytes)))
                return fl_err_set(err, FL_NO_MEMORY, "recording %s: out of memory for %d frames", o->path, r->npick);
        }
        return FL_OK;
    }
    if (!(r->scaled = malloc(bytes))) return fl_err_set(err, FL_NO_MEMORY, "recording %s: out of memory", o->path);
    if (kind == FL_RECORD_GIF) return fl_gif_open(&r->gif, o->path, r->w, r->h, o->delay_cs, err);
    return mp4_open(r, err);
}

int fl_recorder_wants(const fl_recorder_t *r, int64_t step) {
    if (!r) return 0;
    if (r->kind != FL_RECORD_PNG) return 1;
    return r->frames < r->npick && r->pick[r->frames] == step;
}

fl_status fl_recorder_add(fl_recorder_t *r, int64_t step, const uint8_t *rgb, fl_err_t *err) {
    if (r->kind == FL_RECORD_PNG) {
        for (; r->frames < r->npick && r->pick[r->frames] == step; r->frames++) scaled(r, rgb, r->kept[r->frames]);
        return FL_OK;
    }
    const uint8_t *frame = scaled(r, rgb, NULL);
    r->frames++;
    return r->kind == FL_RECORD_GIF ? fl_gif_add(r->gif, frame, err) : mp4_write(r, frame, err);
}

/* Finishes the file when ok (the strip: tiles and writes it), else drops it; frees r. */
static fl_status rec_close(fl_recorder_t *r, int ok, fl_err_t *err) {
    if (!r) return FL_OK;
    fl_status s = FL_OK;
    if (r->kind == FL_RECORD_GIF) {
        if (ok)
            s = fl_gif_close(r->gif, err);
        else
            fl_gif_abort(r->gif);
    } else if (r->kind == FL_RECORD_MP4) {
        if (r->fd >= 0) s = mp4_close(r, ok, err);
    } else if (ok) {
        static const uint8_t gap[3] = {255, 255, 255};
        int sw = 0, sh = 0;
        uint8_t *strip =
            fl_image_tile((const uint8_t *const *)r->kept, r->npick, r->w, r->h, r->o.columns, 4, gap, &sw, &sh);
        s = strip ? fl_png_write(r->o.path, strip, sw, sh, err)
                  : fl_err_set(err, FL_NO_MEMORY, "recording %s: out of memory", r->o.path);
        free(strip);
    }
    for (int i = 0; i < r->npick; i++) free(r->kept[i]);
    free(r->scaled);
    free(r);
    return s;
}

static fl_status check_opts(const fl_record_opts_t *o, int kind, fl_err_t *err) {
    if (o->width < 1 || o->height < 1 || o->scale < 1 || (int64_t)o->width * o->scale > 65535 ||
        (int64_t)o->height * o->scale > 65535)
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "recording %s: frames of %d x %d at scale %d, expected sizes in "
                          "[1, 65535] after scaling",
                          o->path, o->width, o->height, o->scale);
    if (kind == FL_RECORD_PNG && (o->frames < 1 || o->frames > FL_RECORD_MAX_STRIP || o->columns < 1))
        return fl_err_set(err, FL_INVALID_ARGUMENT,
                          "recording %s: a strip of %d frames, %d per row; expected 1 to %d "
                          "frames and at least 1 per row",
                          o->path, o->frames, o->columns, FL_RECORD_MAX_STRIP);
    return FL_OK;
}

fl_status fl_record_episode(const fl_record_opts_t *o, fl_record_play_fn play, void *user, fl_record_result_t *out,
                            fl_err_t *err) {
    memset(out, 0, sizeof *out);
    FL_TRY(fl_record_check(o->path, err));
    const int kind = fl_record_kind_of(o->path);
    FL_TRY(check_opts(o, kind, err));
    /* A strip's first pass: the episode's length. */
    int64_t first = -1;
    if (kind == FL_RECORD_PNG) FL_TRY(play(user, NULL, &first, err));
    fl_recorder_t *r = NULL;
    fl_status s = rec_open(o, kind, first, &r, err);
    if (s == FL_OK) s = play(user, r, &out->length, err);
    if (s == FL_OK && kind == FL_RECORD_PNG && (out->length != first || r->frames != r->npick))
        s = fl_err_set(err, FL_INTERNAL,
                       "recording %s: the replay of the episode was not the same: %lld steps, then "
                       "%lld (is the env deterministic given its seed?)",
                       o->path, (long long)first, (long long)out->length);
    out->frames = r ? r->frames : 0;
    out->width = o->width * o->scale;
    out->height = o->height * o->scale;
    fl_status c = rec_close(r, s == FL_OK, err);
    return s != FL_OK ? s : c;
}
