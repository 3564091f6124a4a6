//go:build !linux

package promtest

import "syscall"

// sysProcAttr: no parent-death signal outside Linux; Prometheus is stopped
// by the test's Cleanup only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
