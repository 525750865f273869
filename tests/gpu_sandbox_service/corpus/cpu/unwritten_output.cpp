// expect: WRONG_RESULT — computes only the first half of the rows.
KF_ENTRY {
  softmax_rows((const float *)inputs[0].data, (float *)outputs[0].data, kf_rows(&inputs[0]) / 2, inputs[0].shape[1]);
  return 0;
}
