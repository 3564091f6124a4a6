// Package osthread runs functions on one locked OS thread. The test
// harnesses start their servers (kube-apiserver, etcd, Prometheus) from
// such a thread: on Linux a child's parent-death signal fires when the
// thread that started it exits, not the process, so the thread must
// outlive the children.
package osthread

import "runtime"

// Thread is one locked OS thread that lives until Close.
type Thread struct{ work chan func() }

// New starts the thread.
func New() *Thread {
	t := &Thread{work: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with the goroutine, after Close.
		for f := range t.work {
			f()
		}
	}()
	return t
}

// Run runs f on the thread and returns when it has.
func (t *Thread) Run(f func()) {
	done := make(chan struct{})
	t.work <- func() { defer close(done); f() }
	<-done
}

// Close ends the thread once the functions running on it return.
func (t *Thread) Close() { close(t.work) }
