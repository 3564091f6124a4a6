//go:build !linux

package main_test

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
