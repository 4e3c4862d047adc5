/* render: canvas drawing (see render.h). Shapes are filled by testing pixel centres
 * inside their clipped bounding boxes: simple, exact at the scales envs draw at. */
#include "envs/core/render.h"

#include <math.h>
#include <string.h>

static inline void put(fl_canvas_t *c, int x, int y, const uint8_t rgb[3]) {
    memcpy(c->rgb + ((size_t)y * (size_t)c->width + (size_t)x) * 3, rgb, 3);
}

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Clipped pixel range covering [lo, hi] in one axis. */
static void span(double lo, double hi, int size, int *a, int *b) {
    if (!(lo <= hi)) { /* NaN or empty */
        *a = 0;
        *b = -1;
        return;
    }
    double fa = floor(lo), fb = ceil(hi);
    *a = fa < 0 ? 0 : fa > size ? size : (int)fa;
    *b = fb < 0 ? -1 : fb > size - 1 ? size - 1 : (int)fb;
}

void fl_canvas_clear(fl_canvas_t *c, const uint8_t rgb[3]) {
    fl_canvas_rect(c, 0, 0, c->width, c->height, rgb);
}

void fl_canvas_rect(fl_canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
    x0 = clampi(x0, 0, c->width);
    x1 = clampi(x1, 0, c->width);
    y0 = clampi(y0, 0, c->height);
    y1 = clampi(y1, 0, c->height);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) put(c, x, y, rgb);
}

void fl_canvas_line(fl_canvas_t *c, double x0, double y0, double x1, double y1, double thickness,
                    const uint8_t rgb[3]) {
    double r = thickness / 2;
    int xa, xb, ya, yb;
    span(fmin(x0, x1) - r, fmax(x0, x1) + r, c->width, &xa, &xb);
    span(fmin(y0, y1) - r, fmax(y0, y1) + r, c->height, &ya, &yb);
    double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = ya; y <= yb; y++)
        for (int x = xa; x <= xb; x++) {
            double px = x + 0.5 - x0, py = y + 0.5 - y0;
            double t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            if (ex * ex + ey * ey <= r * r) put(c, x, y, rgb);
        }
}

void fl_canvas_disc(fl_canvas_t *c, double cx, double cy, double radius, const uint8_t rgb[3]) {
    fl_canvas_line(c, cx, cy, cx, cy, 2 * radius, rgb);
}

void fl_canvas_convex(fl_canvas_t *c, const double *x, const double *y, int n, const uint8_t rgb[3]) {
    if (n < 3) return;
    double lo_x = x[0], hi_x = x[0], lo_y = y[0], hi_y = y[0], area = 0;
    for (int i = 0; i < n; i++) {
        lo_x = fmin(lo_x, x[i]);
        hi_x = fmax(hi_x, x[i]);
        lo_y = fmin(lo_y, y[i]);
        hi_y = fmax(hi_y, y[i]);
        int j = (i + 1) % n;
        area += x[i] * y[j] - x[j] * y[i];
    }
    double sign = area < 0 ? -1 : 1;
    int xa, xb, ya, yb;
    span(lo_x, hi_x, c->width, &xa, &xb);
    span(lo_y, hi_y, c->height, &ya, &yb);
    for (int py = ya; py <= yb; py++)
        for (int px = xa; px <= xb; px++) {
            double qx = px + 0.5, qy = py + 0.5;
            int inside = 1;
            for (int i = 0; i < n && inside; i++) {
                int j = (i + 1) % n;
                double cross = (x[j] - x[i]) * (qy - y[i]) - (y[j] - y[i]) * (qx - x[i]);
                inside = sign * cross >= 0;
            }
            if (inside) put(c, px, py, rgb);
        }
}
