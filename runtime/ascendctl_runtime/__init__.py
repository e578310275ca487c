"""Node-side runtime shipped to every serving node. Standard library only."""
