package dbtest

import (
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// CampaignOptions are the options of the crash campaigns (the root's and
// the broker's): checkpoints under the workload's control, so that a crash
// point names one step in progress, and small segments, so that the
// journal rotates and is collected.
func CampaignOptions(fs vfs.FS) *kdb.Options {
	return &kdb.Options{
		FS:                   fs,
		SegmentSize:          128 << 10,
		CheckpointInterval:   -1,
		CheckpointBytes:      1 << 40,
		CheckpointDirtyPages: 1 << 20,
	}
}

// CampaignSettings are the power-loss models of the crash campaigns: drop
// every unsynced sector, keep them all, keep half, keep half with garbage.
var CampaignSettings = []vfs.CrashOptions{
	{KeepUnsynced: 0},
	{KeepUnsynced: 1},
	{KeepUnsynced: 0.5},
	{KeepUnsynced: 0.5, GarbageUnsynced: 0.2},
}
