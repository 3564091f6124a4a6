package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
)

// When the test binary dies without running Main's cleanup (SIGKILL, a
// crash, a harness that kills go test on a deadline), envtest's processes
// would outlive it: they run in their own process group. Where the platform
// allows, kubetest starts them through the test binary itself, which asks the
// kernel for a signal on its parent's death and then execs the real binary
// (the setting survives exec). See wrapBinaries and execIfWrapper.

// execEnv names, in a wrapper's environment, the directory of the real
// binaries.
const execEnv = "UPSHIFT_KUBETEST_EXEC_DIR"

// execIfWrapper turns this process into the real kube-apiserver or etcd when
// it was started as a wrapper; otherwise it returns.
func execIfWrapper() {
	dir := os.Getenv(execEnv)
	if dir == "" {
		return
	}
	name := filepath.Base(os.Args[0])
	if name != "kube-apiserver" && name != "etcd" {
		return
	}
	if err := execWithParentDeathSignal(filepath.Join(dir, name), os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: exec %s: %v\n", name, err)
		os.Exit(1)
	}
}

// wrapBinaries returns the paths envtest should start for kube-apiserver and
// etcd from dir, and a function that removes what it made. Where parent-death
// signals are supported these are symlinks to the test binary in a temporary
// directory; otherwise the binaries themselves.
func wrapBinaries(dir string) (apiserver, etcd string, cleanup func(), err error) {
	apiserver, etcd = filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd")
	if !parentDeathSupported {
		return apiserver, etcd, func() {}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", "", nil, err
	}
	tmp, err := os.MkdirTemp("", "upshift-kubetest-")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.Symlink(self, filepath.Join(tmp, name)); err != nil {
			cleanup()
			return "", "", nil, err
		}
	}
	// Inherited by the processes envtest starts.
	if err := os.Setenv(execEnv, dir); err != nil {
		cleanup()
		return "", "", nil, err
	}
	return filepath.Join(tmp, "kube-apiserver"), filepath.Join(tmp, "etcd"), cleanup, nil
}
