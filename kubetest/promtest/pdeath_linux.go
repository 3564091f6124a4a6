package promtest

import "syscall"

// sysProcAttr asks the kernel to kill Prometheus when the thread that
// started it (see osThread) exits, which it does when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
