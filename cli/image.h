/* image: writing RGB images to files a browser or image viewer opens, with no library
 * beyond zlib: animated GIF (GIF89a, LZW-coded, looping) and PNG (8-bit RGB).
 *
 * Images are row-major RGB, 3 bytes per pixel, top row first, (height, width, 3).
 *
 * GIF: each frame carries its own colour table. A frame with at most 256 distinct colours
 * (every fleet render) is stored exactly; one with more is quantized to a 6x7x6 colour
 * cube. Frames loop forever; the delay between frames is in hundredths of a second.
 *
 * Writers create the file next to its final name and rename it into place on close, so a
 * reader never sees half a file. Errors name the path and what failed. Not thread-safe per
 * writer; separate writers are independent. */
#ifndef FL_CLI_IMAGE_H
#define FL_CLI_IMAGE_H

#include <stdint.h>

#include "common/status.h"

typedef struct fl_gif fl_gif_t;

/* Starts an animated GIF of width x height frames (1..65535 each) at path. */
fl_status fl_gif_open(fl_gif_t **out, const char *path, int width, int height, int delay_cs, fl_err_t *err);
/* Appends one frame (height, width, 3). */
fl_status fl_gif_add(fl_gif_t *gif, const uint8_t *rgb, fl_err_t *err);
/* Finishes the file and frees the writer (also after an error; then the file is removed).
 * Returns the first error met by add or close. NULL is accepted. */
fl_status fl_gif_close(fl_gif_t *gif, fl_err_t *err);
/* Drops the file (nothing appears at path) and frees the writer, e.g. when what was
 * being recorded failed. NULL is accepted. */
void fl_gif_abort(fl_gif_t *gif);
/* Frames added so far. */
int fl_gif_frames(const fl_gif_t *gif);

/* Writes one RGB image (height, width, 3) as a PNG file. */
fl_status fl_png_write(const char *path, const uint8_t *rgb, int width, int height, fl_err_t *err);

/* Lays n images of (height, width, 3) side by side into one strip of at most `columns`
 * images per row (a grid when n > columns), with a `gap`-pixel border of colour
 * gap_rgb; *out_w, *out_h receive its size. The caller frees the result. NULL when out of
 * memory. */
uint8_t *fl_image_tile(const uint8_t *const *images, int n, int width, int height, int columns, int gap,
                       const uint8_t gap_rgb[3], int *out_w, int *out_h);

#endif
