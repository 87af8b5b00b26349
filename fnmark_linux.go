package kdb

import (
	"runtime"
	"syscall"
)

// On Linux the mark of a transaction function's runner is its OS thread:
// the runner locks its goroutine to the thread for the function's duration,
// and no other goroutine runs on a locked thread, so a caller running on
// that thread is the runner itself. gettid is one system call, against a
// stack trace for the goroutine ID.

func enterMark() uint64 {
	runtime.LockOSThread()
	return uint64(syscall.Gettid())
}

func leaveMark() { runtime.UnlockOSThread() }

func currentMark() uint64 { return uint64(syscall.Gettid()) }
