/* atari_ale: the C interface of the one C++ file of fleet, envs/atari/atari_ale.cc, an
 * `extern "C"` shim over the Arcade Learning Environment's ale::ALEInterface (ALE ships
 * no C API). Built only with ALE (CMake FLEET_ALE; FLEET_HAVE_ALE defined).
 *
 * One fl_ale_t is one emulator with one ROM loaded. Frames are raw Atari frames
 * (FL_ALE_HEIGHT x FL_ALE_WIDTH): fl_ale_act advances one frame. Sticky actions are ALE's
 * own (repeat_action_probability, drawn from ALE's generator, which fl_ale_open seeds).
 * Errors (a ROM that does not load, an unsupported mode) come back as NULL or -1 with a
 * message in err. Not thread-safe per emulator; separate emulators are independent. */
#ifndef FL_ENVS_ATARI_ALE_H
#define FL_ENVS_ATARI_ALE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_ALE_HEIGHT 210 /* most games' screen; PAL games have 250 rows (fl_ale_screen) */
#define FL_ALE_WIDTH 160
#define FL_ALE_MAX_HEIGHT 250
#define FL_ALE_MAX_ACTIONS 18

typedef struct fl_ale fl_ale_t;

typedef struct fl_ale_opts {
    const char *rom;   /* path of the ROM file (.bin) */
    int32_t seed;      /* ALE's random_seed */
    float repeat_prob; /* repeat_action_probability (sticky actions), [0, 1] */
    int mode;          /* game mode, -1 = the game's default */
    int difficulty;    /* difficulty, -1 = the game's default */
    int max_frames;    /* max_num_frames_per_episode, 0 = none */
} fl_ale_opts_t;

/* Loads the ROM into a new emulator; NULL with a message on failure. */
fl_ale_t *fl_ale_open(const fl_ale_opts_t *o, char *err, size_t err_len);
void fl_ale_close(fl_ale_t *a); /* NULL is a no-op */
/* Puts the emulator back where fl_ale_open left it, as if it had been opened anew with
 * the same options but random_seed `seed` (the ROM, mode, difficulty and sticky-action
 * probability stay): what an episode plays after it is frame for frame what it plays
 * after that fl_ale_open, without the load's cost. -1 when it cannot (seed -1, which a
 * load replaces with the time): open a new one then. */
int fl_ale_restart(fl_ale_t *a, int32_t seed);

/* The game's actions without loading the emulator: the minimal set (full = 0) or all 18
 * (full = 1), as ALE action ids in ALE's order, into actions (FL_ALE_MAX_ACTIONS slots).
 * Returns their count, or -1 with a message (not a ROM this ALE supports). */
int fl_ale_game_actions(const char *rom, int full, int *actions, char *err, size_t err_len);

/* One frame with ALE action id `action`; the reward of that frame. */
float fl_ale_act(fl_ale_t *a, int action);
/* The game reached a terminal state (not counting the frame limit). */
int fl_ale_terminal(const fl_ale_t *a);
/* The episode reached max_frames. */
int fl_ale_truncated(const fl_ale_t *a);
int fl_ale_lives(fl_ale_t *a);
int fl_ale_frame_number(const fl_ale_t *a); /* frames since the episode began */
void fl_ale_reset(fl_ale_t *a);
/* The screen's size: height (210, or 250 for PAL games) and width (160). */
void fl_ale_screen(const fl_ale_t *a, int *height, int *width);
/* The screen: grayscale (height * width bytes) or RGB (3 bytes a pixel). */
void fl_ale_gray(const fl_ale_t *a, uint8_t *out);
void fl_ale_rgb(const fl_ale_t *a, uint8_t *out);
/* "noop", "fire", "up", "right", ..., "downleftfire" for ALE action ids 0..17. */
const char *fl_ale_action_name(int action);

#ifdef __cplusplus
}
#endif

#endif
