package msb

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Edges of name and label validation that no other test reached (found by
// mutation testing, docs/TESTING.md).
func TestValidateNameEdges(t *testing.T) {
	err := ValidateName("--name", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must not be empty")

	assert.NoError(t, ValidateName("--name", strings.Repeat("a", maxNameLen)), "msb's limit itself is allowed")
	err = ValidateName("--name", strings.Repeat("a", maxNameLen+1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is 129 bytes, longer than msb's limit of 128")
}

func TestLabelKeyMustNotBeEmpty(t *testing.T) {
	err := checkLabel("--label", Label{Key: "", Value: "v"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must not be empty")
	assert.NoError(t, checkLabel("--label", Label{Key: "k", Value: ""}))
}
