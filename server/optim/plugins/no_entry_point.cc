// A shared library without the plugin entry point, for the loader's tests.
extern "C" int DistoptNotAPlugin() { return 42; }
