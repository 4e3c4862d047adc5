/* recorder: one episode's frames into a picture file, the one recording path of
 * `fleet env record` (random actions, or a trained agent with --checkpoint) and
 * `fleet eval --record`. The file's extension picks the sink:
 *   .gif   an animated GIF of every frame (cli/image.h), delay_cs apart;
 *   .mp4   an H.264 video of every frame at 100 / delay_cs frames per second, written by
 *          ffmpeg (an optional program: Debian's `ffmpeg` package) reading raw RGB on a
 *          pipe; odd sizes are padded to even ones (yuv420p needs them);
 *   .png   a strip of K frames evenly spaced over the episode (the reset's frame first,
 *          the last step's last), C per row with 4-pixel white gaps (fl_image_tile).
 * Frames are the env's renders (one after the reset, one per agent step), enlarged
 * `scale` times (every pixel a scale x scale block).
 *
 * An episode reaches the recorder through a play function (fl_record_play_fn) that the
 * caller writes: it plays the episode and, for every step whose frame the recorder
 * wants (fl_recorder_wants), renders and hands it over (fl_recorder_add). GIF and MP4
 * take one pass. A strip takes two, so that memory stays at K frames: the first call of
 * play gets rec = NULL and only tells the episode's length; the second must replay the
 * same episode (same seeds; the env and the policy are deterministic given them), and
 * fl_record_episode checks that it had the same length.
 *
 * Files appear whole or not at all: the GIF and PNG writers rename into place, and
 * ffmpeg writes PATH.tmp<pid> that is renamed over PATH once ffmpeg exited 0; on any
 * error the partial file is removed. Errors name the path and what failed; ffmpeg's own
 * messages go to stderr. One owner thread; the MP4 sink ignores SIGPIPE while it writes
 * (a dead ffmpeg is then an error, not a killed process) and restores the old handler. */
#ifndef FL_CLI_RECORDER_H
#define FL_CLI_RECORDER_H

#include <stdint.h>

#include "common/status.h"

typedef enum { FL_RECORD_GIF, FL_RECORD_PNG, FL_RECORD_MP4 } fl_record_kind;

#define FL_RECORD_MAX_STRIP 256 /* frames of a strip at most */

/* The kind that path's extension names (.gif, .png, .mp4, any case), or -1. */
int fl_record_kind_of(const char *path);

/* What recording to path needs, checked before an episode is played: a known extension
 * (FL_INVALID_ARGUMENT naming the three), and for .mp4 ffmpeg on PATH
 * (FL_FAILED_PRECONDITION saying how to install it, or to use .gif). */
fl_status fl_record_check(const char *path, fl_err_t *err);

typedef struct fl_record_opts {
    const char *path;    /* the file; its extension picks the sink */
    int width, height;   /* of one render */
    int scale;           /* >= 1 */
    int delay_cs;        /* GIF: hundredths of a second between frames; MP4: 100 / delay_cs
                            frames per second (0 counts as 1) */
    int frames, columns; /* PNG: K in [1, FL_RECORD_MAX_STRIP] frames, C >= 1 per row */
} fl_record_opts_t;

typedef struct fl_recorder fl_recorder_t;

/* 1 when the frame of step `step` (0 = the reset's) is to be rendered and added. */
int fl_recorder_wants(const fl_recorder_t *r, int64_t step);
/* Adds the render rgb (height, width, 3) as step `step`'s frame (a strip ignores frames it
 * does not want). Errors of the sink (I/O, ffmpeg gone). */
fl_status fl_recorder_add(fl_recorder_t *r, int64_t step, const uint8_t *rgb, fl_err_t *err);

/* Plays the episode; rec is NULL on a strip's first pass (see above). *length receives
 * the episode's length in steps (its frames are 0..length). */
typedef fl_status (*fl_record_play_fn)(void *user, fl_recorder_t *rec, int64_t *length, fl_err_t *err);

typedef struct fl_record_result {
    int64_t length;    /* the episode's steps */
    int frames;        /* frames written */
    int width, height; /* of one written frame (scaled) */
} fl_record_result_t;

/* Records the episode that play plays into o->path (one pass, or two for a strip).
 * Errors: play's own (the partial file is removed), the sink's, FL_INVALID_ARGUMENT for
 * bad options, FL_FAILED_PRECONDITION without ffmpeg for .mp4, FL_INTERNAL when a
 * strip's replay had another length than the first pass. */
fl_status fl_record_episode(const fl_record_opts_t *o, fl_record_play_fn play, void *user, fl_record_result_t *out,
                            fl_err_t *err);

#endif
