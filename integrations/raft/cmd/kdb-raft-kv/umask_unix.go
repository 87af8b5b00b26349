//go:build unix

package main

import "syscall"

// restrictUmask keeps what the node writes from other users: raft's file
// snapshot store creates its files (the FSM's whole export) with the
// default mode, 0666 less the umask, so under the usual 022 every value
// stored would be readable by anyone on the host. With 027 they are 0640
// and directories 0750, as kdb's own files are.
func restrictUmask() { syscall.Umask(syscall.Umask(0) | 0o027) }
