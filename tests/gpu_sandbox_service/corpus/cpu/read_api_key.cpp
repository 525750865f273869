// expect: REJECTED — reads a secret from the environment.
KF_ENTRY { const char *key = getenv("OPENAI_API_KEY"); if (key) puts(key); KF_SOFTMAX(inputs, outputs); return 0; }
