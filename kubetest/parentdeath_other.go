//go:build !linux

package kubetest

import (
	"errors"
	"syscall"
)

const parentDeathSupported = false

func execWithParentDeathSignal(string, []string) error {
	return errors.New("parent-death signal not supported on this platform")
}

func procAttr() *syscall.SysProcAttr { return nil }
