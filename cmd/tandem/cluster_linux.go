package main

import "syscall"

// childProcAttr puts a broker of `tandem cluster` in its own process group
// (a terminal's Ctrl-C goes to tandem cluster alone, which stops the
// brokers) and has the kernel send it SIGTERM, a controlled shutdown,
// should tandem cluster die without stopping it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
