"""SGLang 0.5.23 runtime (CPU install profile: scripts/install_sglang_cpu.sh)."""
