/* The pod sandbox's process: sleeps until told to stop. */
/* Test-only (tests/cluster.sh, TESTENV_NODE=1): no registry is reachable here, so the pod
 * sandbox image is made locally from this program, built static. */
#include <signal.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  for (;;) pause();
}
