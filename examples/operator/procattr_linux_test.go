package main_test

import "syscall"

// procAttr kills the operator if the test binary dies first.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
