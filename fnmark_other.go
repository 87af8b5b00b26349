//go:build !amd64 && !arm64

package kdb

// Elsewhere the mark is the goroutine ID (goid).

func enterMark() uint64 { return goid() }

func leaveMark() {}

func currentMark() uint64 { return goid() }

// viewMark is 0 here: the goroutine ID costs microseconds, too much for
// every View, so Close called inside a View is not caught (it waits
// CloseWait for that View, then closes under it).
func viewMark() uint64 { return 0 }
