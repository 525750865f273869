// expect: WRONG_RESULT — computes right from the shape it first saw, then shrinks the descriptor it was given.
static int64_t rows = -1, cols = -1;
KF_ENTRY {
  if (rows < 0) { rows = kf_rows(&inputs[0]); cols = inputs[0].shape[inputs[0].ndim - 1]; }
  softmax_rows((const float *)inputs[0].data, (float *)outputs[0].data, rows, cols);
  ((kf_tensor *)inputs)[0].shape[0] = 1;  /* the contract passes inputs const */
  return 0;
}
