"""pytest plugin (registered through the ``pytest11`` entry point); being written."""
