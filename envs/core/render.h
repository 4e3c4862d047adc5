/* render: small drawing helpers for environments' render functions (the families keep
 * their own colours: MinAtar's in envs/minatar/common.h).
 *
 * A canvas is a caller-owned RGB image (height, width, 3), row-major, top row first.
 * Every function clips to the canvas, so shapes may lie partly or wholly outside it.
 * Coordinates are pixels: x to the right, y downwards; a pixel's centre is at
 * (x + 0.5, y + 0.5). Nothing allocates; functions only write the canvas. */
#ifndef FL_ENVS_RENDER_H
#define FL_ENVS_RENDER_H

#include <stdint.h>

typedef struct fl_canvas {
    uint8_t *rgb;
    int width, height;
} fl_canvas_t;

/* Fills the whole canvas. */
void fl_canvas_clear(fl_canvas_t *c, const uint8_t rgb[3]);
/* Fills the pixels x in [x0, x1), y in [y0, y1). */
void fl_canvas_rect(fl_canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]);
/* Fills the pixels whose centre lies within thickness / 2 of the segment (x0,y0)-(x1,y1):
 * a line with round caps. */
void fl_canvas_line(fl_canvas_t *c, double x0, double y0, double x1, double y1, double thickness, const uint8_t rgb[3]);
/* Fills the pixels whose centre lies within radius of (cx, cy). */
void fl_canvas_disc(fl_canvas_t *c, double cx, double cy, double radius, const uint8_t rgb[3]);
/* Fills the convex polygon with n >= 3 vertices (x[i], y[i]), in either winding order. */
void fl_canvas_convex(fl_canvas_t *c, const double *x, const double *y, int n, const uint8_t rgb[3]);

#endif
