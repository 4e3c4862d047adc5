/* atari: the Atari 2600 games of the Arcade Learning Environment (ALE) as built-in envs,
 * for every ROM in the ROM folder (fl_atari_roms_dir): the build's (scripts/ale.sh puts
 * them in .deps/ale-<version>/roms), or $ALE_ROMS_DIR.
 *
 * Names: "atari-<game>" (e.g. atari-pong, atari-space_invaders): grayscale frames, uint8
 * (210, 160, 1) as ALE's getScreenGrayscale gives them ((250, 160, 1) for the few PAL
 * games, e.g. air_raid, and a height of their own for a few more; a game's height is found
 * by running it once and kept in the user's cache folder,
 * ${XDG_CACHE_HOME:-~/.cache}/fleet/atari-screens.txt), and the game's minimal action
 * set; "atari-<game>-full": ALE's legal action set (getLegalActionSet, as Gymnasium's
 * full_action_space: the 18 actions, 9 in Skiing and Lost Luggage); "-rgb" (after -full when both): RGB
 * frames (210, 160, 3). Reward: the game's score change; terminal: ALE's game over. One
 * env step is one emulator frame (env.args frameskip=N: N frames, rewards summed, the
 * last frame observed; the standard protocols use the max-pooling frameskip wrapper
 * instead); the env's own limit is 108,000 steps (the protocols' 30 minutes at 60 Hz,
 * frames at frameskip 1; env.max_episode_steps replaces it).
 *
 * Per instance: env.sticky_actions is ALE's repeat_action_probability; env.args takes
 * "frameskip=N mode=M difficulty=D ale_seed=S" (space- or comma-separated; mode and
 * difficulty among those the game offers, else its defaults). Seeds: an instance's
 * emulator is started at its first reset with ALE's random_seed drawn from the
 * instance's fleet generator, so a seed and an action sequence replay exactly; ale_seed=S
 * sets ALE's random_seed itself, any int32 (to replay a trace of another ALE program, as
 * tests/integration_atari_python.c does with ale-py; Gymnasium's seeds map to negative
 * ones too). The first episode, as every other, begins with one reset_game after the
 * mode and difficulty are set (as Gymnasium's AtariEnv begins it). An instance holds an
 * emulator outside its state: the definitions have a close function (ABI 3).
 * Without ALE in the build there are no Atari envs (fl_atari_available() is 0). */
#ifndef FL_ENVS_ATARI_H
#define FL_ENVS_ATARI_H

#include <stdint.h>

#include "envs/core/env.h"
#include "envs/core/family.h"

#define FL_ATARI_MAX_GAMES 128

/* The family's rows in the registry: no fixed rows; the base env "atari-<game>" of every
 * game (fl_atari_count, fl_atari_at), listed after the other families, and the -full and
 * -rgb variants found by name (fl_atari_find). None declares a reward bound. */
extern const fl_env_family_t fl_env_family_atari;

/* Emulators: a closed instance's emulator is kept (up to 8 in a process, at most 16)
 * and restarted for the next instance of the same game, sticky-action probability, mode
 * and difficulty, as a new one with that instance's seed would start (fl_ale_restart):
 * the frames are the same, without ALE's load (about 0.15 s). fl_atari_keep_emulators
 * sets how many are kept (0: none; those above are closed) and returns the former
 * number; fl_atari_loads counts the ROM loads of this process. */
int fl_atari_keep_emulators(int n);
uint64_t fl_atari_loads(void);

/* 1 when this build has ALE. */
int fl_atari_available(void);
/* The ROM folder ("" when none). */
const char *fl_atari_roms_dir(void);
/* The games of the ROM folder (sorted by name): their count, their names, and the
 * definition of game i's base env ("atari-<game>"; NULL when ALE does not support it). */
int fl_atari_count(void);
const char *fl_atari_game_name(int i);
const fl_env_def_t *fl_atari_at(int i);
/* The definition named `name` ("atari-<game>[-full][-rgb]"), or NULL. */
const fl_env_def_t *fl_atari_find(const char *name);
/* 1 when def is one of these envs (the episodiclife wrapper needs its lives). */
int fl_atari_env(const fl_env_def_t *def);
/* An Atari instance's lives (for an episodic-life wrapper); -1 for other envs or before
 * the first reset. */
int fl_atari_lives(const fl_env_def_t *def, void *state);

#endif
