package tools_test

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

func TestMain(m *testing.M) { realvm.Main(m) }
