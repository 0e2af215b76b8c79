//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts a broker of `tandem cluster` in its own process group:
// a terminal's Ctrl-C goes to tandem cluster alone, which stops the
// brokers. (Only Linux can tie a child's life to its parent's.)
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
