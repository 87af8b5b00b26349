//go:build !linux

package bench

// dropFileCache does nothing off Linux.
func dropFileCache(path string) error { return nil }
