"""catalog/"""
