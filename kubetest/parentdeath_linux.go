package kubetest

import (
	"os"
	"syscall"
)

const parentDeathSupported = true

// execWithParentDeathSignal asks for SIGKILL when the parent (the test
// binary's thread that started this process) dies, then execs path.
func execWithParentDeathSignal(path string, args []string) error {
	ppid := os.Getppid()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		return errno
	}
	if os.Getppid() != ppid { // the parent died before prctl
		os.Exit(1)
	}
	env := os.Environ()
	for i, kv := range env {
		if len(kv) > len(execEnv) && kv[:len(execEnv)+1] == execEnv+"=" {
			env = append(env[:i], env[i+1:]...)
			break
		}
	}
	return syscall.Exec(path, append([]string{path}, args...), env)
}

// procAttr makes a process started by the cluster die with the thread that
// started it (see osthread).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
