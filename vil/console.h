/* console.h: how the commands show progress (`--progress bar|plain|none`): a line redrawn in
 * place on a terminal, plain lines into a file, or none; and the test that tells a terminal a
 * person watches from the pseudo-terminals a launcher hands its processes. */
#ifndef VIL_CONSOLE_H
#define VIL_CONSOLE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VIL_PROGRESS_AUTO = 0, /* bar on a watched terminal (vil_console_is_terminal), else plain */
    VIL_PROGRESS_BAR,      /* a line redrawn in place ("\r\033[K") under the log lines */
    VIL_PROGRESS_PLAIN,    /* whole lines only: no carriage returns, no escape codes */
    VIL_PROGRESS_NONE,     /* no progress lines at all */
} VilProgressMode;

#define VIL_PROGRESS_HELP                                                                        \
    "bar, plain or none; auto: a bar on a terminal, plain lines into a file or pipe, under "      \
    "mpirun or srun, or with TERM=dumb"

/* "bar", "plain", "none" or "auto": the mode, or -1 for another word (NULL: auto). */
int vil_progress_parse(const char *word);
const char *vil_progress_name(VilProgressMode mode);

/* 1 when f is a terminal someone watches: a tty that is this process's controlling terminal
 * (tcgetpgrp answers on it), TERM is not "dumb", and no launcher started the process. Open MPI
 * gives each rank a pseudo-terminal of its own even when mpirun's output goes to a file; that
 * pty is not the rank's controlling terminal, and mpirun / srun show in the environment. */
int vil_console_is_terminal(FILE *f);

/* A progress display on one stream. mode is resolved (never AUTO); shown: a redrawn line sits on
 * the stream's last line without its newline. */
typedef struct {
    FILE *f;
    VilProgressMode mode;
    int shown;
    double drawn_at; /* vil_now() of the last redraw */
} VilProgress;

/* asked resolved for f: AUTO becomes BAR on a watched terminal (vil_console_is_terminal), else
 * PLAIN. */
void vil_progress_init(VilProgress *p, FILE *f, VilProgressMode asked);
/* The stream for a whole line: a redrawn line cleared first ("\r\033[K"). */
FILE *vil_progress_line(VilProgress *p);
/* In BAR mode, 1 when a redraw is due: at most five a second, or always with force. */
int vil_progress_due(const VilProgress *p, int force);
/* In BAR mode: the line replaced by the formatted text (no newline), flushed. */
void vil_progress_redraw(VilProgress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
