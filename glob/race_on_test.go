//go:build race

package glob

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
