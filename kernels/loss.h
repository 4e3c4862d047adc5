/* loss: regression losses of the DQN update, with per-sample importance weights.
 *
 * Both losses take predictions and targets of shape (B) (the learner gathers Q(s, a) of
 * the taken actions) and per-sample weights (prioritized replay's importance weights;
 * NULL means all ones). They return the weighted mean over the batch,
 *     L = (1/B) * sum_b w_b * l(pred_b - target_b),
 * dividing by B (not by the sum of weights), as in Ape-X/PER, and write
 * dL/dpred_b into dpred when it is not NULL. Sums are taken in double.
 *   huber: l(x) = 0.5 x^2 if |x| <= delta, else delta (|x| - 0.5 delta)
 *          dl/dx = clamp(x, -delta, delta)
 *   mse:   l(x) = x^2, dl/dx = 2 x
 * Preconditions (asserted): B >= 1, delta > 0. Thread-safe: pure functions. */
#ifndef FL_KERNELS_LOSS_H
#define FL_KERNELS_LOSS_H

float fl_loss_huber(const float *pred,                 /* (B) */
                    const float *target,               /* (B) */
                    const float *weights,              /* (B) or NULL */
                    int B, float delta, float *dpred); /* (B) or NULL; may alias pred */

float fl_loss_mse(const float *pred,    /* (B) */
                  const float *target,  /* (B) */
                  const float *weights, /* (B) or NULL */
                  int B, float *dpred); /* (B) or NULL; may alias pred */

#endif
