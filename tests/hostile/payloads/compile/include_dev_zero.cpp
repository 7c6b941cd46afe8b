// The preprocessor reads an endless file as source: only a cap can end it.
#include "/dev/zero"
int main() { return 0; }
