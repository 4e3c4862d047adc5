/* loss: weighted Huber and squared-error losses (see loss.h). */
#include "kernels/loss.h"

#include <assert.h>
#include <math.h>

float fl_loss_huber(const float *pred, const float *target, const float *weights, int B, float delta, float *dpred) {
    assert(pred && target && B >= 1 && delta > 0.0f);
    const double inv_b = 1.0 / (double)B;
    double sum = 0.0;
    for (int i = 0; i < B; i++) {
        const double x = (double)pred[i] - (double)target[i];
        const double w = weights ? (double)weights[i] : 1.0;
        const double ax = fabs(x);
        double l, g;
        if (ax <= delta) {
            l = 0.5 * x * x;
            g = x;
        } else {
            l = delta * (ax - 0.5 * delta);
            g = x > 0 ? delta : (x < 0 ? -delta : x); /* NaN stays NaN */
        }
        sum += w * l;
        if (dpred) dpred[i] = (float)(w * g * inv_b);
    }
    return (float)(sum * inv_b);
}

float fl_loss_mse(const float *pred, const float *target, const float *weights, int B, float *dpred) {
    assert(pred && target && B >= 1);
    const double inv_b = 1.0 / (double)B;
    double sum = 0.0;
    for (int i = 0; i < B; i++) {
        const double x = (double)pred[i] - (double)target[i];
        const double w = weights ? (double)weights[i] : 1.0;
        sum += w * x * x;
        if (dpred) dpred[i] = (float)(2.0 * w * x * inv_b);
    }
    return (float)(sum * inv_b);
}
