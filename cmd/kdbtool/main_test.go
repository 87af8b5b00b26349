package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// pausedSaving is what a child with KDBTOOL_TEST_PAUSE_SAVE=1 prints on
// stderr, with the name, when it stops in the middle of a .broken copy.
const pausedSaving = "test: paused saving"

// TestMain lets a test run the test binary as kdbtool itself (for tests
// that must SIGKILL a real process): KDBTOOL_TEST_MAIN=1 makes it main.
func TestMain(m *testing.M) {
	if os.Getenv("KDBTOOL_TEST_MAIN") == "1" {
		// KDBTOOL_TEST_NOFILE=N: run with at most N file descriptors.
		if n, err := strconv.ParseUint(os.Getenv("KDBTOOL_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				os.Exit(99)
			}
		}
		// KDBTOOL_TEST_PAUSE_SAVE=1: stop in the middle of saving a
		// .broken copy (say so on stderr) until killed.
		if os.Getenv("KDBTOOL_TEST_PAUSE_SAVE") == "1" {
			testHookSaving = func(name string) {
				fmt.Fprintf(os.Stderr, "%s %s\n", pausedSaving, name)
				time.Sleep(time.Hour)
			}
		}
		// KDBTOOL_TEST_PLANT_FREE_TMP=TARGET: once recover has the store
		// open, plant a symbolic link to TARGET at db.free.tmp, where its
		// closing checkpoint writes the free list. First a checkpoint of
		// its own, which waits for the one recovery asked for: that one,
		// in the background, may be writing db.free.tmp at that moment
		// (the link failed with EEXIST, exit 98, once in ~30 runs).
		if target := os.Getenv("KDBTOOL_TEST_PLANT_FREE_TMP"); target != "" {
			testHookBeforeClose = func(db *kdb.DB, dir string) {
				if err := db.Checkpoint(); err != nil {
					os.Exit(97)
				}
				if err := os.Symlink(target, filepath.Join(dir, "db.free.tmp")); err != nil {
					os.Exit(98)
				}
			}
		}
		// KDBTOOL_TEST_PAUSE_EXPORT=1: once the export has written a
		// first part of the snapshot, say so on stderr and wait until
		// interrupted.
		if os.Getenv("KDBTOOL_TEST_PAUSE_EXPORT") == "1" {
			testHookExporting = func(ctx context.Context) {
				fmt.Fprintln(os.Stderr, pausedExporting)
				<-ctx.Done()
			}
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
