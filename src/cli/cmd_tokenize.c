/* cmd_tokenize.c — `tokroute tokenize`: placeholder, filled in below. */
#include <stdio.h>
int cmd_tokenize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; return 2; }
