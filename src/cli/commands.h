/* commands.h — the subcommands of the tokroute CLI; each takes argv after the command name. */
#ifndef TR_CLI_COMMANDS_H
#define TR_CLI_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_ui(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_collect(int argc, char **argv);
int cmd_train_router(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_eval(int argc, char **argv);

#endif /* TR_CLI_COMMANDS_H */
