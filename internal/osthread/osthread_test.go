package osthread

import (
	"syscall"
	"testing"
)

// TestRunsOnOneThread: every function runs on the same OS thread.
func TestRunsOnOneThread(t *testing.T) {
	th := New()
	defer th.Close()
	var first, second int
	th.Run(func() { first = syscall.Gettid() })
	th.Run(func() { second = syscall.Gettid() })
	if first == 0 || first != second {
		t.Fatalf("ran on threads %d and %d", first, second)
	}
}
