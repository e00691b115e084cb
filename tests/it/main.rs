mod minilm;
