"""Test-data writers (SYNTHETIC Neuron files for tests and samples); the library never imports them."""
